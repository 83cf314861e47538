"""Reading fields keeps DataLoader workers flat: nothing per sample piles up in them.

Every sample's fields are read and decoded in the worker at each read and dropped with
the batch; the metadata of the whole dataset stays in memory-mapped numpy tables.
"""

from __future__ import annotations

import gc
from pathlib import Path

import psutil
import pytest
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, collate
from readers.options import PartitionOptions
from tests.helpers import pack_with_fields
from tests.reading.test_datasets import worker_uss

NUM = 240
WARM_UP = 2
EPOCHS = 3
MAX_GROWTH = 1.05


@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_fields_keep_persistent_workers_flat(tmp_path: Path, fmt: str) -> None:
    """2 persistent workers per loader, every field read: USS after 3 more epochs is
    within 5% of what it was after two warm-up epochs (caches, imports and the
    allocator's arenas fill in them, with or without fields alike).

    gc.freeze keeps the collector in the forked workers from copying pages of the test
    runner's own objects, which would show up as growth that is not the datasets'.
    """
    path, _ = pack_with_fields(tmp_path, fmt, count=NUM)
    it = PackedIterableDataset(path, fields="all", batch_size=16,
                               partition=PartitionOptions(chunk_size=16))
    ds = PackedDataset(path, fields="all", chunk_size=16)
    sampler = ChunkSampler(ds)
    loaders = [DataLoader(data, batch_size=16, num_workers=2, persistent_workers=True,
                          multiprocessing_context="fork", collate_fn=collate, **extra)
               for data, extra in ((it, {}), (ds, {"sampler": sampler}))]
    gc.collect()
    gc.freeze()
    try:
        sizes = []
        for epoch in range(WARM_UP + EPOCHS):
            it.set_epoch(epoch)
            sampler.set_epoch(epoch)
            for loader in loaders:
                batches = list(loader)
                assert sum(len(batch["caption"]) for batch in batches) == NUM
                assert all(batch["boxes"].shape[0] == len(batch["boxes_lengths"])
                           for batch in batches)
            sizes.append(worker_uss())
    finally:
        gc.unfreeze()
    print(f"{fmt}: worker USS by epoch, MiB:", [round(size / 2**20, 2) for size in sizes])
    assert len(psutil.Process().children()) >= 4
    assert sizes[-1] < sizes[WARM_UP - 1] * MAX_GROWTH, f"grew over {EPOCHS} epochs: {sizes}"
