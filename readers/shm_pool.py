"""Recycled shared memory for batches leaving a DataLoader worker (used by readers.collate).

Why: a worker sends each batch to the main process in shared memory. torch allocates it
fresh for every batch, and on the 2-core benchmark machine touching those new pages
costs three times as much as copying the pixels into them (~50 vs ~23 µs per 224x224
image, a fault and a zeroed page each 4 KiB). A worker that gathers into buffers it
allocated before skips that, and sends each batch's labels inside the pickle instead of
in another new piece of shared memory (a file descriptor handed over each time).
npy batches are gathered straight into such a buffer; other batches of equal-sized
tensors (decoded JPEGs) are stacked into one, which is what default_collate does into
fresh memory.

Safety: a buffer is reused only once the main process has dropped everything that
views it. The worker marks a slot busy before it sends the batch; the main process,
when it unpickles the batch, ties a finalizer to the storage of the images tensor (torch
keeps one Python storage object per storage, alive as long as any view of it), and the
finalizer marks the slot free in a small state array both processes map. A batch that
cannot be tracked (its list was rebuilt in the worker, the state array never arrived)
keeps its slot busy for good, and once every slot is busy the worker falls back to a
fresh buffer per batch, as torch does: slower, never wrong.

Limits: only with torch's default "file_descriptor" sharing strategy. A batch sent on
from the main process to a third process loses its protection once the main process
drops it (clone it first); a DataLoader's own pin-memory thread copies, which is safe.
Each worker keeps up to POOL_BYTES of buffers mapped.
"""

from __future__ import annotations

import collections
import os
import secrets
import weakref
from typing import Any

import numpy as np
import torch
import torch.multiprocessing

POOL_BYTES = 96 << 20  # per worker: enough for the DataLoader's prefetched batches
MIN_SLOTS = 2
MAX_SLOTS = 16
FREE, BUSY = 0, 1
KNOWN_STATES = 64  # state arrays the main process remembers (one per worker lifetime)


def shared_buffer(shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialized tensor in shared memory, as default_collate makes in workers."""
    nbytes = int(np.prod(shape)) * dtype.itemsize
    storage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


class SlotPool:
    """A worker's buffers, and the state array through which the main process frees them."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = f"{self.pid}-{secrets.token_hex(8)}"
        self.state_tensor = shared_buffer((MAX_SLOTS,)).zero_()
        self.state = self.state_tensor.numpy()
        self.buffers: list[torch.Tensor] = []
        self.state_sent = False

    def take(self, shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """A shared buffer of `shape` marked busy: a free slot, a new one, or an unpooled one."""
        for slot, buffer in enumerate(self.buffers):
            if self.state[slot] == FREE and tuple(buffer.shape) == shape \
                    and buffer.dtype == dtype:
                self.state[slot] = BUSY
                return buffer
        buffer = shared_buffer(shape, dtype)
        if len(self.buffers) < self._max_slots(buffer.untyped_storage().nbytes()):
            self.state[len(self.buffers)] = BUSY
            self.buffers.append(buffer)
        return buffer

    def _max_slots(self, nbytes: int) -> int:
        return max(MIN_SLOTS, min(MAX_SLOTS, POOL_BYTES // max(1, nbytes)))

    def slot_of(self, images: torch.Tensor) -> int | None:
        """The slot whose buffer `images` views, or None (not pooled)."""
        pointer = images.untyped_storage().data_ptr()
        for slot, buffer in enumerate(self.buffers):
            if buffer.untyped_storage().data_ptr() == pointer:
                return slot
        return None


_POOL: SlotPool | None = None


def worker_pool() -> SlotPool | None:
    """This worker process's pool; None where recycling is off (another sharing strategy)."""
    global _POOL
    if torch.multiprocessing.get_sharing_strategy() != "file_descriptor":  # type: ignore[no-untyped-call]
        return None
    if _POOL is None or _POOL.pid != os.getpid():
        _POOL = SlotPool()
    return _POOL


class PooledBatch(list[Any]):
    """[images, labels, ...] whose images sit in a pool slot; unpickles as a plain list.

    It stays a list in the worker, so code that wraps `collate` can still index it.
    """

    def __init__(self, items: list[Any], images: torch.Tensor, pool: SlotPool,
                 slot: int) -> None:
        super().__init__(items)
        self.images, self.pool, self.slot = images, pool, slot

    def __reduce__(self) -> Any:
        items = list(self)
        if not items or items[0] is not self.images:  # changed in the worker: untracked
            return list, (items,)
        labels = items[1] if len(items) > 1 else None
        if isinstance(labels, torch.Tensor) and not labels.untyped_storage().is_shared():
            labels = labels.numpy()  # 8 bytes a sample, by value: no shared memory
        state = None if self.pool.state_sent else self.pool.state_tensor
        self.pool.state_sent = True
        return _arrived, (self.images, labels, items[2:], self.pool.token, state, self.slot)


_STATES: collections.OrderedDict[str, torch.Tensor] = collections.OrderedDict()


def _arrived(images: torch.Tensor, labels: Any, rest: list[Any], token: str,
             state: torch.Tensor | None, slot: int) -> list[Any]:
    """In the main process: the plain batch, its slot freed once `images`' storage dies."""
    if state is not None:
        _STATES[token] = state
    known = _STATES.get(token)
    if known is not None:
        _STATES.move_to_end(token)
        while len(_STATES) > KNOWN_STATES:
            _STATES.popitem(last=False)
        weakref.finalize(images.untyped_storage(), _free, os.getpid(), known.numpy(), slot)
    if isinstance(labels, np.ndarray):
        labels = torch.from_numpy(labels)
    return [images, labels, *rest]


def _free(pid: int, state: np.ndarray, slot: int) -> None:
    """Mark the slot free, only in the process that received the batch (not a fork of it)."""
    if os.getpid() == pid:
        state[slot] = FREE
