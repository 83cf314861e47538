"""One owner of the split: under Accelerate's splitters (IterableDatasetShard, BatchSamplerShard)
the readers hand over the whole epoch and the splitter keeps each rank's part; anywhere else
they split by rank themselves. In-process, each rank's splitter built by hand, as
`accelerate.prepare` builds it (tests/frameworks/test_frameworks.py runs the real thing)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions
from readers.passes.partition_owner import LoaderView, loader_view
from tests.helpers import pack_wds

accelerate_data = pytest.importorskip("accelerate.data_loader")
NUM, RANKS, BATCH = 60, 2, 5
LOADERS = [(0, None), (2, "fork"), (2, "spawn")]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("owner"), NUM, 16, min_side=8, max_side=12)


def iterable(path: Path, rank: int = 0, **options: Any) -> PackedIterableDataset:
    """A reader told its rank, as a process group would tell it."""
    split = PartitionOptions(chunk_size=4, buffer_size=6, rank=rank, world_size=RANKS)
    return PackedIterableDataset(path, decode="raw", with_keys=True, partition=split, **options)


def keys_of(loader: DataLoader[Any]) -> list[str]:
    return [key for batch in loader for key in batch[-1]]


def assert_exactly_once(per_rank: list[list[str]]) -> None:
    seen = Counter(key for keys in per_rank for key in keys)
    assert len(seen) == NUM and set(seen.values()) == {1}, "not every sample exactly once"
    assert len({len(keys) for keys in per_rank}) == 1, "uneven ranks"


@pytest.mark.parametrize(("workers", "context"), LOADERS)
@pytest.mark.parametrize("batch_size", [BATCH, None])
def test_iterable_dataset_shard_gets_the_whole_epoch(path: Path, workers: int,
                                                     context: str | None,
                                                     batch_size: int | None) -> None:
    per_rank = []
    for rank in range(RANKS):
        shard = accelerate_data.IterableDatasetShard(
            iterable(path, rank, batch_size=batch_size), batch_size=BATCH, num_processes=RANKS,
            process_index=rank)
        loader = DataLoader(shard, batch_size=BATCH, num_workers=workers,
                            multiprocessing_context=context)
        per_rank.append(keys_of(loader))
        assert len(loader) * BATCH == len(per_rank[-1]), "len() disagrees with the pass"
    assert_exactly_once(per_rank)


def test_batch_sampler_shard_gets_every_batch(path: Path) -> None:
    ds = PackedDataset(path, decode="raw", with_keys=True)
    per_rank = []
    for rank in range(RANKS):
        sampler = ChunkSampler(ds, partition=PartitionOptions(rank=rank, world_size=RANKS))
        shard = accelerate_data.BatchSamplerShard(
            BatchSampler(sampler, BATCH, drop_last=False), num_processes=RANKS,
            process_index=rank)
        loader = DataLoader(ds, batch_sampler=shard)
        per_rank.append(keys_of(loader))
        assert len(loader) * BATCH == len(per_rank[-1])
        assert len(sampler) == NUM // RANKS, "asked by nobody, the sampler splits by rank"
    assert_exactly_once(per_rank)


def test_readers_split_when_no_framework_does(path: Path) -> None:
    per_rank = []
    for rank in range(RANKS):
        ds = PackedIterableDataset(path, decode="raw", with_keys=True,
                                   partition=PartitionOptions(chunk_size=4, rank=rank,
                                                              world_size=RANKS))
        loader = DataLoader(ds, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
        per_rank.append(keys_of(loader))
        assert len(ds) == NUM // RANKS
    assert_exactly_once(per_rank)


def test_one_process_frameworks_leave_the_split_alone(path: Path) -> None:
    ds = iterable(path)
    shard = accelerate_data.IterableDatasetShard(ds, batch_size=BATCH, num_processes=1)
    assert len(list(shard)) == len(shard) == NUM // RANKS, "the readers split"
    assert loader_view(ds) == LoaderView()


class RenamedShard(accelerate_data.IterableDatasetShard):  # type: ignore[misc]
    """Accelerate's IterableDatasetShard as the readers would see it in a release that
    renamed `num_processes`: the same class and package, the argument gone for readers'
    code (the shard's own methods still read it)."""

    __module__ = "accelerate.data_loader"

    def __getattribute__(self, name: str) -> Any:
        if name == "num_processes" and sys._getframe(1).f_globals["__name__"].startswith(
                "readers."):
            raise AttributeError(name)
        return super().__getattribute__(name)


RenamedShard.__name__ = RenamedShard.__qualname__ = "IterableDatasetShard"


def shard_keys(path: Path, by: str, kind: Any = None, workers: int = 0) -> list[list[str]]:
    per_rank = []
    for rank in range(RANKS):
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, batch_size=BATCH,
                                   partition=PartitionOptions(chunk_size=4, buffer_size=6,
                                                              rank=rank, world_size=RANKS,
                                                              by=by))  # type: ignore[arg-type]
        shard = (kind or accelerate_data.IterableDatasetShard)(
            ds, batch_size=BATCH, num_processes=RANKS, process_index=rank)
        loader = DataLoader(shard, batch_size=BATCH, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
        per_rank.append(keys_of(loader))
    return per_rank


def test_a_renamed_splitter_argument_stops_the_pass_with_what_to_pass(path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"accelerate's IterableDatasetShard has no "
                                              r"`num_processes`.*PartitionOptions\(by='framework'\)"):
        shard_keys(path, "auto", RenamedShard)
    assert_exactly_once(shard_keys(path, "framework", RenamedShard))


@pytest.mark.parametrize("workers", [0, 2])
def test_without_frames_the_split_is_said(path: Path, workers: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from readers.passes import partition_owner

    monkeypatch.setattr(partition_owner.inspect, "currentframe", lambda: None)
    assert_exactly_once(shard_keys(path, "framework", workers=workers))
    ds = iterable(path)
    assert loader_view(ds) == LoaderView(), "nothing to look at: nothing found"


def test_by_readers_splits_even_under_a_splitter(path: Path) -> None:
    per_rank = shard_keys(path, "readers")
    seen = Counter(key for keys in per_rank for key in keys)
    assert set(seen.values()) == {1} and len(seen) == NUM // RANKS, (
        "each rank's splitter keeps its half of the readers' rank part")
    assert_exactly_once(shard_keys(path, "auto"))


def test_split_by_is_checked() -> None:
    with pytest.raises(ValueError, match="by must be one of 'auto', 'readers', 'framework', "
                                         "not 'torch'"):
        PartitionOptions(by="torch")  # type: ignore[arg-type]
