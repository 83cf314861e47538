"""`readers.collate` for samples of stored bytes (decode="raw", every format but npy):
one RawBatch (readers.batching.raw_batch) in place of a list of bytes objects.

In a DataLoader worker the batch is built in the worker's recycled shared memory
(readers.batching._shm_pool.SlotPool.take_bytes) and leaves as a PooledBatch, its keys
as one buffer (readers.batching._columns); the main process gets [RawBatch, labels]
or [RawBatch, labels, keys] over the slot, freed once nothing views it there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

from readers.batching._pooled import PooledBatch
from readers.batching._shm_pool import shared_buffer, worker_pool
from readers.batching.raw_batch import RawBatch

Sample = tuple[Any, ...]


def collate_raw(batch: Sequence[Sample], indices: Sequence[int] | None) -> list[Any]:
    """[RawBatch, labels(, keys)] of (bytes, label(, key)) samples; `indices`: the
    samples' dataset indices where the reader gave them (PackedDataset's batches)."""
    images = [sample[0] for sample in batch]
    rest: list[Any] = default_collate([sample[1:] for sample in batch])
    if get_worker_info() is None:
        return [RawBatch.of(images, indices), *rest]
    pool = worker_pool()
    if pool is None:
        return [RawBatch.of(images, indices, _shared), *rest]
    raw = RawBatch.of(images, indices, pool.take_bytes)
    slot = pool.slot_of(raw.buffer)
    if slot is None:  # the pool is full: an unpooled buffer, as default_collate's
        return [raw, *rest]
    return PooledBatch([raw, *rest], raw.buffer, pool, slot, (RawBatch, (raw.count,)))


def _shared(nbytes: int) -> torch.Tensor:
    return shared_buffer((nbytes,))
