"""`readers.collate`: the DataLoader collate that sends a batch as a few buffers.

What it returns, for samples from the readers:

    (image, label[, key])     [images, labels(, keys)] as default_collate's, the images
                              one (B, 3, H, W) uint8 tensor, channels-last memory where
                              the samples were (npy, JPEGs decoded without a resize):
                              the layout torch's channels_last models want
    raw npy rows              [rows, labels(, keys)], rows one (B, H*W*3) uint8 tensor
    raw stored bytes          [RawBatch, labels(, keys)]: the bytes back to back in one
                              uint8 buffer + offsets, iterating bytes-like per sample
    dicts (fields=)           a dict, one batched value a field

Anything else goes to `default_collate`. A `Batch` from `PackedDataset.__getitems__`
is taken by its columns: an npy batch's gathered rows are the batch, uncopied.

Why: torch sends each batch from a worker in shared memory it allocates fresh, and
faulting in new shared pages costs more than copying the pixels. In a worker `collate`
builds the batch's images (or raw bytes) in shared memory the worker recycles
(`SlotPool`), sends labels by value in the pickle and a column of strings as one
buffer. A worker in which `collate` has run gathers its next npy batches straight into
a recycled buffer. In the main process (num_workers=0) no shared memory is involved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import default_collate, get_worker_info

from readers.batching._pooled import PooledBatch
from readers.batching._shm_pool import FREE, SlotPool, shared_buffer, worker_pool
from readers.batching.batch import Batch, Sample
from readers.batching.fields_collate import collate_dicts
from readers.batching.raw_batch import RAW_TYPES, RawBatch

_collate_seen = False  # whether `collate` has run in this process (DataLoader workers only)


class Gatherer(Protocol):
    """A reader of fixed-size pixel rows that can copy several into one array at once."""

    def gather(self, indices: Sequence[int], out: npt.NDArray[np.uint8]) -> None:
        """Copy rows `indices` into `out` (len(indices), H, W, 3), each checked."""


def gathered_samples(reader: Gatherer, positions: Sequence[int], shape: tuple[int, int],
                     raw: bool, make: Callable[[int, Any], Sample]) -> list[Sample]:
    """One gather for the batch; `make(k, image)` builds sample k around its image view
    (a dataset with a transform: a Batch of rows otherwise)."""
    rows = gathered_rows(reader, positions, shape, False)
    if raw:
        flat = rows.numpy().reshape(len(positions), -1)
        return [make(k, flat[k]) for k in range(len(positions))]
    return [make(k, rows[k].permute(2, 0, 1)) for k in range(len(positions))]


def gathered_rows(reader: Gatherer, positions: Sequence[int], shape: tuple[int, int],
                  recyclable: bool) -> torch.Tensor:
    """The (B, H, W, 3) rows at `positions`, copied and checked in one gather.

    recyclable: the images reach `collate` as gathered here (no transform), so a
    worker may gather into a recycled shared buffer.
    """
    height, width = shape
    rows = _batch_buffer((len(positions), height, width, 3), recyclable)
    reader.gather(positions, rows.numpy())
    return rows


def _batch_buffer(shape: tuple[int, ...], recyclable: bool) -> torch.Tensor:
    """A recycled shared buffer where `collate` will send this batch from a worker as it
    is; else ordinary memory (a fresh buffer of the same size reuses the freed one's pages)."""
    if recyclable and _collate_seen and get_worker_info() is not None:
        pool = worker_pool()
        if pool is not None:
            return pool.take(shape)
    return torch.empty(shape, dtype=torch.uint8)


def collate(batch: Sequence[Sample]) -> Any:
    """default_collate, but images gathered as one batch come back as it, uncopied, and a
    worker sends its batches in recycled shared memory.

    The result is [images, labels] or [images, labels, keys], like default_collate's,
    with a RawBatch for images of stored bytes (decode="raw"); for dict samples
    (`fields=`), a dict, ragged arrays padded.
    """
    if isinstance(batch, Batch) and len(batch):
        if batch.fields is not None:
            return batch.collate_columns(collate)
        if batch.rows is not None:
            return _collate_gathered(batch)
    samples: Sequence[Any] = batch
    if samples and all(type(sample) is dict for sample in samples):
        return collate_dicts(cast(Sequence[dict[str, Any]], samples), collate)
    if not _plain_samples(batch):
        return default_collate(list(batch))
    images = [sample[0] for sample in batch]
    if all(type(image) in RAW_TYPES for image in images):  # stored bytes: decode="raw"
        return collate_raw(batch, getattr(batch, "indices", None))
    whole = _whole_batch(images) if isinstance(images[0], torch.Tensor) else _whole_rows(images)
    if get_worker_info() is None:
        return default_collate(list(batch)) if whole is None else [whole, *_rest(batch)]
    global _collate_seen
    _collate_seen = True
    if whole is not None and whole.dim() == 2:  # raw npy rows: tensors, as default_collate
        images = list(whole)
    pool = worker_pool()
    stackable = pool is not None and _stackable(images)
    if whole is None and not stackable:
        return default_collate(list(batch))
    return _sent(whole, lambda: images, pool if stackable else None, _rest(batch))


def _plain_samples(batch: Sequence[Any]) -> bool:
    """(image, label, ...) tuples or lists: batches collate may build itself. Anything
    else (namedtuples, dicts, bare tensors) keeps default_collate's structure."""
    return bool(batch) and all(type(sample) in (tuple, list) and len(sample) >= 2
                               for sample in batch)


def _rest(batch: Sequence[Sample]) -> list[Any]:
    """Labels (and keys) batched as default_collate batches them."""
    rest: list[Any] = default_collate([sample[1:] for sample in batch])
    return rest


def _collate_gathered(batch: Batch) -> list[Any]:
    """An npy batch as gathered: its buffer (in a pool slot when a worker gathered it
    there), the labels and keys batched as default_collate batches them."""
    whole, rest = batch.whole(), default_collate(batch.rests())
    if get_worker_info() is None:
        return [whole, *rest]
    global _collate_seen
    _collate_seen = True
    return _sent(whole, lambda: list(whole), worker_pool(), rest)


def _sent(whole: torch.Tensor | None, images: Callable[[], list[torch.Tensor]],
          pool: SlotPool | None, rest: list[Any]) -> list[Any]:
    """[images, *rest] as a worker sends them: in a slot of `pool`, as gathered there
    (npy) or else copied into one; without a pool, `whole` in shared memory. `images`
    gives the samples' images, asked for only where they are copied."""
    if pool is None:
        assert whole is not None
        if not whole.untyped_storage().is_shared():  # it leaves in shared memory: copy it
            whole = _stacked(images(), shared_buffer)
        return [whole, *rest]
    slot = None if whole is None else pool.slot_of(whole)
    if whole is not None and slot is None and whole.untyped_storage().is_shared():
        return [whole, *rest]  # gathered into a fresh shared buffer: the pool was full
    if whole is None or slot is None or pool.state[slot] != FREE:  # not in a slot, or out
        whole = _stacked(images(), pool.take)
        slot = pool.slot_of(whole)
    if slot is None:  # the pool is full: an unpooled buffer, as default_collate's
        return [whole, *rest]
    return PooledBatch([whole, *rest], whole, pool, slot)


def _stackable(images: list[Any]) -> bool:
    """Plain CPU tensors of one shape and dtype: what default_collate would stack."""
    first = images[0] if images else None
    if type(first) is not torch.Tensor or first.device.type != "cpu" or first.requires_grad:
        return False
    return all(type(image) is torch.Tensor and image.shape == first.shape
               and image.dtype == first.dtype and image.device == first.device
               for image in images)


def _stacked(images: list[torch.Tensor],
             allocate: Callable[[tuple[int, ...], torch.dtype], torch.Tensor]) -> torch.Tensor:
    """The images stacked in one buffer from `allocate` (a pool's take, or shared_buffer).
    Channels-last (C, H, W) images (npy rows, JPEGs decoded without a resize) stay
    channels-last: a plain copy each, where stacking them planar, as default_collate
    does, transposes, which is slower."""
    first = images[0]
    if all(_channels_last(image) for image in images):
        rows = [image.permute(1, 2, 0) for image in images]
        out = allocate((len(rows), *rows[0].shape), first.dtype)
        return torch.stack(rows, 0, out=out).permute(0, 3, 1, 2)
    out = allocate((len(images), *first.shape), first.dtype)
    return torch.stack(images, 0, out=out)


def _channels_last(image: torch.Tensor) -> bool:
    if image.dim() != 3 or image.shape[0] < 2:
        return False
    channels, _, width = image.shape
    return image.stride() == (1, width * channels, channels)


def _whole_rows(rows: list[Any]) -> torch.Tensor | None:
    """The (B, N) uint8 tensor that raw npy rows (1-D numpy views, decode="raw") are
    consecutive rows of, or None."""
    first = rows[0]
    if not isinstance(first, np.ndarray) or first.ndim != 1 or first.dtype != np.uint8:
        return None
    owner = first.base.base if isinstance(first.base, np.ndarray) else None
    size, address = len(first), first.ctypes.data
    if not isinstance(owner, torch.Tensor) or owner.dtype != torch.uint8 \
            or owner.numel() != size * len(rows) or owner.data_ptr() != address \
            or not owner.is_contiguous():
        return None
    for k, row in enumerate(rows):
        if not isinstance(row, np.ndarray) or row.base is not first.base \
                or row.dtype != first.dtype \
                or row.shape != first.shape or row.strides != first.strides \
                or row.ctypes.data != address + k * size:
            return None
    return owner.view(len(rows), size)


def _whole_batch(images: list[Any]) -> torch.Tensor | None:
    """The (B, 3, H, W) channels-last tensor that `images` are consecutive views of, or None."""
    first = images[0]
    if not isinstance(first, torch.Tensor) or first.dim() != 3 or first.dtype != torch.uint8:
        return None
    channels, height, width = first.shape
    step = channels * height * width
    storage = first.untyped_storage()
    if first.stride() != (1, width * channels, channels) or first.storage_offset() != 0 \
            or storage.nbytes() != step * len(images):
        return None
    pointer = storage.data_ptr()
    for k, image in enumerate(images):
        if not isinstance(image, torch.Tensor) or image.shape != first.shape \
                or image.dtype != first.dtype \
                or image.stride() != first.stride() or image.storage_offset() != k * step \
                or image.untyped_storage().data_ptr() != pointer:
            return None
    return first.as_strided((len(images), channels, height, width),
                            (step, 1, width * channels, channels), 0)


def collate_raw(batch: Sequence[Sample], indices: Sequence[int] | None) -> list[Any]:
    """[RawBatch, labels(, keys)] of (bytes, label(, key)) samples; `indices`: the
    samples' dataset indices where the reader gave them (PackedDataset's batches)."""
    images = [sample[0] for sample in batch]
    rest = _rest(batch)
    if get_worker_info() is None:
        return [RawBatch.of(images, indices), *rest]
    pool = worker_pool()
    if pool is None:
        return [RawBatch.of(images, indices, lambda nbytes: shared_buffer((nbytes,))), *rest]
    raw = RawBatch.of(images, indices, pool.take_bytes)
    slot = pool.slot_of(raw.buffer)
    if slot is None:  # the pool is full: an unpooled buffer, as default_collate's
        return [raw, *rest]
    return PooledBatch([raw, *rest], raw.buffer, pool, slot, (RawBatch, (raw.count,)))
