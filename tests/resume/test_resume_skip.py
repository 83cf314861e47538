"""skip_first_batches over our iterable reader, in one process: the rest of the pass in the
very order and the next pass whole. readers.skip_first_batches (what a Trainer's
`get_resumed_dataloader` returns) reads none of the skipped batches; Accelerate's own reads
and drops them, with the same result (tests/resume/test_resume_trainer.py runs the Trainer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

import readers
from readers import PackedIterableDataset, PartitionOptions
from tests.framework_support import SIZE, KeyIds
from tests.helpers import pack_wds

NUM, BATCH, SKIP = 45, 4, 3


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("accelerate")
    return pack_wds(tmp_path_factory.mktemp("skip"), NUM, 16, min_side=8, max_side=12)


class Count:
    """A transform that counts the samples decoded in this process."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, image: Any) -> Any:
        self.calls += 1
        return image


def keys(loader: Any, collate: KeyIds) -> list[str]:
    return [key for _, _, ids in loader for key in collate.keys_of(ids)]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("how", ["dispatch", "shard", "unprepared"])
@pytest.mark.parametrize("skipper", ["readers", "accelerate"])
def test_skip_first_batches_starts_at_the_position(path: Path, workers: int, how: str,
                                                   skipper: str) -> None:
    from accelerate import (  # type: ignore[import-untyped]
        Accelerator,
        DataLoaderConfiguration,
        skip_first_batches,
    )

    collate = KeyIds.of(path)
    count = Count()
    config = DataLoaderConfiguration(dispatch_batches=how == "dispatch")
    accelerator = Accelerator(cpu=True, dataloader_config=config)

    def loader() -> tuple[PackedIterableDataset, Any]:
        it = PackedIterableDataset(path, size=SIZE, with_keys=True, transform=count,
                                   partition=PartitionOptions(chunk_size=4, buffer_size=8))
        built = DataLoader(it, batch_size=BATCH, num_workers=workers, collate_fn=collate,
                           multiprocessing_context="fork" if workers else None)
        return it, built if how == "unprepared" else accelerator.prepare(built)

    full = keys(loader()[1], collate)
    assert sorted(full) == sorted(collate.keys)
    it, resumed = loader()
    count.calls = 0
    skip = readers.skip_first_batches if skipper == "readers" else skip_first_batches
    assert keys(skip(resumed, SKIP), collate) == full[SKIP * BATCH:]
    if workers == 0:  # with workers, tests/resume/test_resume_trainer.py counts their decodes
        decoded = NUM - SKIP * BATCH if skipper == "readers" else NUM
        assert count.calls == decoded, "the skipped batches were decoded"
    # an Accelerate loader names its epoch as it starts (the Trainer sets it), a plain one
    # takes the reader's next
    (resumed if hasattr(resumed, "set_epoch") else it).set_epoch(0)
    assert keys(resumed, collate) == full, "the next pass is whole"


def test_a_map_style_loader_goes_to_accelerates_skip(path: Path) -> None:
    ds = readers.PackedDataset(path, size=SIZE, with_keys=True)
    collate = KeyIds.of(path)
    loader = DataLoader(ds, batch_size=BATCH, sampler=readers.ChunkSampler(ds), collate_fn=collate)
    full = keys(loader, collate)
    loader.sampler.set_epoch(0)  # type: ignore[attr-defined]
    assert keys(readers.skip_first_batches(loader, SKIP), collate) == full[SKIP * BATCH:]


def test_a_negative_skip_is_refused(path: Path) -> None:
    loader = DataLoader(PackedIterableDataset(path), batch_size=BATCH)
    with pytest.raises(ValueError, match="num_batches must be 0 or more, not -1"):
        readers.skip_first_batches(loader, -1)
