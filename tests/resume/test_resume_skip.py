"""accelerate's skip_first_batches (transformers' Trainer resumes with it) over our iterable
reader: the rest of the pass in the very order, the skipped batches not read, in one
process; the next pass whole (tests/resume/test_resume_trainer.py runs the Trainer itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from readers import PackedIterableDataset, SplitOptions
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
def test_skip_first_batches_starts_at_the_position(path: Path, workers: int, how: str) -> None:
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
                                   split=SplitOptions(chunk_size=4, buffer_size=8))
        built = DataLoader(it, batch_size=BATCH, num_workers=workers, collate_fn=collate,
                           multiprocessing_context="fork" if workers else None)
        return it, built if how == "unprepared" else accelerator.prepare(built)

    full = keys(loader()[1], collate)
    assert sorted(full) == sorted(collate.keys)
    it, resumed = loader()
    count.calls = 0
    assert keys(skip_first_batches(resumed, SKIP), collate) == full[SKIP * BATCH:]
    if workers == 0:  # with workers, tests/resume/test_resume_trainer.py counts their decodes
        assert count.calls == NUM - SKIP * BATCH, "the skipped batches were decoded"
    it.set_epoch(0)  # a prepared loader names its epoch, a plain one takes the next
    assert keys(resumed, collate) == full, "the next pass is whole"
