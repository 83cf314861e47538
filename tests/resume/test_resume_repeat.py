"""A resume applies to one pass: after a pass that read the re-split rest of an epoch (a
state from another world size), `set_epoch(e)` again reads the whole epoch e, in the order
a fresh reader has; DataLoaders with 0 and 2 workers, fork, spawn and persistent workers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from packer.core.index import open_dataset
from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions, loop_state
from tests.helpers import pack_wds

NUM, BATCH, EPOCH, STOP = 45, 4, 1, 3
SPLIT = PartitionOptions(chunk_size=4, buffer_size=8, drop_last=False)
LOADERS = [(0, None, False), (2, "fork", False), (2, "spawn", False), (2, "fork", True)]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("repeat"), NUM, 16, min_side=8, max_side=12)


def keys(loader: Any) -> list[str]:
    return [key for _, _, names in loader for key in names]


def stopped(path: Path, map_style: bool) -> list[str]:
    """What 2 ranks (0 workers) read of EPOCH in STOP batches each."""
    seen = []
    for rank in range(2):
        split = PartitionOptions(chunk_size=4, buffer_size=8, drop_last=False, rank=rank,
                             world_size=2)
        if map_style:
            ds = PackedDataset(path, decode="raw", with_keys=True)
            sampler = ChunkSampler(ds, partition=split)
            sampler.set_epoch(EPOCH)
            loader = DataLoader(ds, batch_size=BATCH, sampler=sampler)
        else:
            it = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split)
            it.set_epoch(EPOCH)
            loader = DataLoader(it, batch_size=BATCH)
        seen += keys(batch for _, batch in zip(range(STOP), loader, strict=False))
    return seen


def one_rank(path: Path, map_style: bool, workers: int, context: str | None,
             persistent: bool) -> tuple[Any, DataLoader[Any]]:
    """(what holds the order, its loader) on 1 rank."""
    options: dict[str, Any] = {"num_workers": workers, "multiprocessing_context": context,
                               "persistent_workers": persistent}
    if map_style:
        ds = PackedDataset(path, decode="raw", with_keys=True)
        sampler = ChunkSampler(ds, partition=SPLIT)
        return sampler, DataLoader(ds, batch_size=BATCH, sampler=sampler, **options)
    it = PackedIterableDataset(path, decode="raw", with_keys=True, partition=SPLIT)
    return it, DataLoader(it, batch_size=BATCH, **options)


@pytest.mark.parametrize("map_style", [False, True])
@pytest.mark.parametrize(("workers", "context", "persistent"), LOADERS)
def test_a_second_pass_over_a_resumed_epoch_reads_it_whole(
        path: Path, map_style: bool, workers: int, context: str | None,
        persistent: bool) -> None:
    if map_style and persistent:
        pytest.skip("the sampler runs in the main process: persistence changes nothing")
    before = stopped(path, map_style)
    order, loader = one_rank(path, map_style, workers, context, persistent)
    order.load_state_dict(loop_state(EPOCH, STOP, BATCH, 0, world_size=2))
    rest = keys(loader)
    assert Counter(before) + Counter(rest) == Counter(open_dataset(path)[1].keys())
    order.set_epoch(EPOCH)
    again = keys(loader)
    fresh_order, fresh = one_rank(path, map_style, workers, context, False)
    fresh_order.set_epoch(EPOCH)
    assert again == keys(fresh), "the second pass over the epoch re-applied the resume"
