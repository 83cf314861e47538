"""A state saved once an epoch is finished (the save-every-batch loop's last save) resumes
as that epoch's empty rest, on any world size and through every way a state loads: the
loop's next `set_epoch(e + 1)` then reads epoch e + 1 whole, once, and nothing of epoch
e comes again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from tests.helpers import pack_wds

NUM, EPOCH, BATCH = 37, 0, 3


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("finished"), NUM, 8, min_side=16, max_side=24)


def partition(world: int) -> PartitionOptions:
    return PartitionOptions(rank=0, world_size=world, chunk_size=4, buffer_size=8)


def iterable(path: Path, world: int) -> PackedIterableDataset:
    reader = PackedIterableDataset(path, decode="raw", with_keys=True,
                                   partition=partition(world))
    reader.set_epoch(EPOCH)
    return reader


def sampler(path: Path, world: int) -> ChunkSampler:
    dataset = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    chunks = ChunkSampler(dataset, partition=partition(world))
    chunks.set_epoch(EPOCH)
    return chunks


def next_epoch(resumed: Any, fresh: Any) -> tuple[list[Any], list[Any]]:
    """The resumed reader's and a fresh one's epoch EPOCH + 1."""
    resumed.set_epoch(EPOCH + 1)
    fresh.set_epoch(EPOCH + 1)
    return list(resumed), list(fresh)


@pytest.mark.parametrize("world", [2, 3])
def test_a_sampler_state_of_a_finished_epoch(path: Path, world: int) -> None:
    saved = sampler(path, 2)
    assert len(list(saved)) == 18
    resumed = sampler(path, world)
    resumed.load_state_dict(saved.state_dict())
    assert list(resumed) == [], "a finished epoch leaves nothing to read"
    after, fresh = next_epoch(resumed, sampler(path, world))
    assert after == fresh


@pytest.mark.parametrize("world", [2, 3])
def test_a_loader_state_of_a_finished_epoch_loaded_into_the_reader(path: Path,
                                                                   world: int) -> None:
    saved = iterable(path, 2)
    assert sum(1 for _ in saved) == 18
    resumed = iterable(path, world)
    resumed.load_state_dict({"loader": {"worker 0": saved.state_dict()}})
    assert list(resumed) == [], "a finished epoch leaves nothing to read"
    after, fresh = next_epoch(resumed, iterable(path, world))
    assert [sample[2] for sample in after] == [sample[2] for sample in fresh]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_a_stateful_dataloader_state_of_a_finished_epoch_on_another_world(path: Path) -> None:
    """Saved with the last batch of an epoch on 2 ranks (torchdata marks a state finished
    only once the loader has raised StopIteration), loaded into the loader's own workers on
    3: they pool their counts (WorkerBoard) and find nothing left."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    loader = stateful(iterable(path, 2), batch_size=BATCH, num_workers=2,
                      multiprocessing_context="fork")
    batches, read = iter(loader), 0
    while read < 18:  # the last batch, and not the StopIteration after it
        read += len(next(batches)[2])
    state = loader.state_dict()
    reader = iterable(path, 3)
    resumed = stateful(reader, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
    resumed.load_state_dict(state)
    assert list(resumed) == [], "a finished epoch leaves nothing to read"
    reader.set_epoch(EPOCH + 1)
    fresh = iterable(path, 3)
    fresh.set_epoch(EPOCH + 1)
    assert sorted(key for batch in resumed for key in batch[2]) == \
        sorted(sample[2] for sample in fresh)
