"""What the shm_pool test files share: a small packed dataset, and batches sent and
received as a worker and the main process would, inside one process."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import shared_cache
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.testing import make_sample_folder
from readers import PackedDataset
from readers.batching import _shm_arrivals as arrivals
from readers.batching._pooled import PooledBatch
from readers.batching._shm_pool import BUSY, FREE, SlotPool

SIZE = (12, 10)
NUM = 48


def pack_small(root: Path, formats: tuple[str, ...] = ("npy",)) -> dict[str, Path]:
    """NUM generated images packed in each of `formats`, every image SIZE (npy) or
    resized to it at pack time (the others)."""
    src = make_sample_folder(root / "src", count=NUM, classes=3, min_side=16, max_side=24)
    for fmt in formats:
        convert(src, root / fmt, fmt, encode=EncodeOptions(size=SIZE),
                run=ConvertOptions(workers=0))
    return {fmt: root / fmt for fmt in formats}


def pickled_for_another_process(batch: Any) -> bytes:
    """Pickled as a worker does; torch's shared cache is cleared, else unpickling in this
    process would give back this process's own storage instead of a new mapping."""
    data: bytes = ForkingPickler.dumps(batch)
    shared_cache.clear()
    return data


def received(batch: Any) -> Any:
    """`batch` as the main process gets it from a worker."""
    return pickle.loads(pickled_for_another_process(batch))


def sent(pool: SlotPool, shape: tuple[int, ...]) -> tuple[PooledBatch, int]:
    """A batch in a fresh slot of `pool`, made ready to leave (its slot busy)."""
    images = pool.take(shape)
    slot = pool.slot_of(images)
    assert slot is not None and pool.state[slot] == FREE  # busy once it leaves
    batch = PooledBatch([images, torch.arange(shape[0])], images, pool, slot)
    assert pool.state[slot] == BUSY
    return batch, slot


def read_by_key(path: Path) -> dict[str, torch.Tensor]:
    """Every image by key, read in the main process (no pool involved)."""
    out: dict[str, torch.Tensor] = {}
    for images, _, keys in DataLoader(PackedDataset(path, with_keys=True), batch_size=8):
        out.update((key, image.clone()) for key, image in zip(keys, images, strict=True))
    return out


def from_a_slot(tensor: torch.Tensor) -> bool:
    """Whether `tensor` views a pooled batch this process received (and still tracks)."""
    return tensor.untyped_storage().data_ptr() in arrivals._LIVE
