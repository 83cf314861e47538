"""loop_state outside a process group: it records world size 1 only where no reader of the
process was given another; readers split for rank r of 2 make it ask for world_size=."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions, loop_state
from tests.helpers import pack_wds


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("loop_world"), 12, 4, min_side=8, max_side=10)


def test_without_a_group_or_split_readers_the_state_says_one_rank(path: Path) -> None:
    reader = PackedIterableDataset(path, decode="raw")
    assert loop_state(0, 3, batch_size=4)["world_size"] == 1
    del reader


@pytest.mark.parametrize("build", ["iterable", "sampler"])
def test_readers_given_two_ranks_refuse_a_silent_one(path: Path, build: str) -> None:
    split = PartitionOptions(rank=1, world_size=2)
    reader = PackedIterableDataset(path, decode="raw", partition=split) if build == "iterable" \
        else ChunkSampler(PackedDataset(path, decode="raw"), partition=split)
    with pytest.raises(ValueError, match=r"given world_size=2 .* pass world_size=2"):
        loop_state(0, 3, batch_size=4, num_workers=2)
    state = loop_state(0, 3, batch_size=4, num_workers=2, world_size=2)
    assert state["world_size"] == 2
    del reader
    gc.collect()  # only live readers count: once it is gone, one rank is the default again
    assert loop_state(0, 3, batch_size=4)["world_size"] == 1
