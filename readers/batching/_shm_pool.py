"""Recycled shared memory for batches leaving a DataLoader worker (used by `collate`).

Why: a worker sends each batch to the main process in shared memory. torch allocates it
fresh for every batch, and touching those new pages (a fault and a zeroed page each
4 KiB) costs more than copying the pixels into them. A worker that gathers into buffers
it allocated before skips that, and sends each batch's labels inside the pickle instead
of in another new piece of shared memory (a file descriptor handed over each time).
npy batches are gathered straight into such a buffer; other batches of equal-sized
tensors (decoded JPEGs) are stacked into one, which is what default_collate does into
fresh memory.

Safety: a buffer is reused only when nothing views it any more, in either process.
- In the worker: torch's count of references to the buffer's storage is back to the
  pool's own one (a sample, a cached batch, a batch not yet pickled all hold one).
- In the main process: the worker marks the slot busy when it sends the batch; the main
  process, when it unpickles it, ties a finalizer to the storage of the images tensor
  (torch keeps one Python storage object per storage, alive as long as any view of it),
  and the finalizer marks the slot free in a small state array both processes map.
- Beyond the main process: when the main process pickles a tracked tensor or storage
  (a multiprocessing queue, a Process argument) or forks while holding one, that
  batch's slot is given up (GONE): the worker forgets the buffer, which then lives as
  long as anyone maps it, like any torch shared memory.
A batch that cannot be tracked (its list was rebuilt in the worker, the state array
never arrived) keeps its slot busy; once every slot is busy the worker falls back to a
fresh buffer per batch, as torch does: slower, never wrong.

Hand-over: a slot's file descriptor crosses to the main process once, with the first
batch sent from it (torch hands one over for every batch, through a socket and a thread
in each process); the main process keeps it, and maps the slot afresh for each batch
that arrives from it, so every batch has storage of its own whose death frees the slot.
The state array also records which buffer of each slot the main process holds.

Limits: only with torch's default "file_descriptor" sharing strategy, and only where
torch has every private name the pool uses (storage reference counts among them; each is
reached through readers.batching._torch_private only). Each worker keeps up to
POOL_BYTES mapped.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
from multiprocessing.reduction import DupFd
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
import torch.multiprocessing

from readers.batching import _torch_private as private

POOL_BYTES = 96 << 20  # per worker: enough for the DataLoader's prefetched batches
MIN_SLOTS = 2
MAX_SLOTS = 16
FREE, BUSY, GONE = 0, 1, 2
KNOWN_STATES = 64  # state arrays the main process remembers (one per worker lifetime)


def pool_supported() -> bool:
    """Whether this torch has every private name the pool uses (_torch_private)."""
    return private.all_present()


def shared_buffer(shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialized tensor in shared memory, as default_collate makes in workers."""
    if not private.has("_new_shared"):  # public API, at the cost of one copy more
        shared: torch.Tensor = torch.empty(shape, dtype=dtype).share_memory_()  # type: ignore[no-untyped-call]
        return shared
    storage = private.new_shared_storage(int(np.prod(shape)) * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


class SlotImages(NamedTuple):
    """A batch's head as it leaves a worker: where it lies in a slot's buffer, and the
    buffer's file descriptor when the main process does not hold that buffer yet."""

    buffer_id: int
    handle: Any  # a picklable DupFd of the buffer, or None
    nbytes: int
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


def views(state: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """(the slots' states, the id of the buffer the main process holds for each slot)
    of one shared state array."""
    return state[:MAX_SLOTS], state[MAX_SLOTS:].view(np.int64)


class _Slot:
    """One recycled buffer, and what holds it when only the pool does."""

    def __init__(self, buffer: torch.Tensor, buffer_id: int) -> None:
        self.buffer, self.buffer_id = buffer, buffer_id
        self.storage = buffer.untyped_storage()  # the one Python object of this storage
        self.own_references, self.own_holders = self._holders()

    def _holders(self) -> tuple[int, int]:
        """(tensors holding the storage, Python references to its storage object)."""
        return private.storage_use_count(self.buffer), sys.getrefcount(self.storage)

    def idle(self) -> bool:
        """Nothing in this process holds the buffer but the pool (no view, no storage)."""
        return self._holders() == (self.own_references, self.own_holders)


class SlotPool:
    """A worker's buffers, and the state array through which the main process frees them."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = f"{self.pid}-{secrets.token_hex(8)}"
        self.state_tensor = shared_buffer((MAX_SLOTS * 9,)).zero_()
        self.state, self.held = views(self.state_tensor.numpy())
        self.slots: list[_Slot | None] = []  # None: given up, its place free for a new one
        self.state_sent = False
        self._lock = threading.Lock()
        self._buffers_made = 0

    @property
    def buffers(self) -> list[torch.Tensor]:
        """The buffers the pool holds now."""
        return [slot.buffer for slot in self.slots if slot is not None]

    def take(self, shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """A shared buffer of `shape`: a slot nobody views, a new slot, or an unpooled one.

        The result is a fresh view, so the slot counts as in use for as long as the
        caller (or anything made from it) holds it.
        """
        with self._lock:
            for index, slot in enumerate(self.slots):
                if slot is not None and self._reusable(index, slot, shape, dtype):
                    return slot.buffer.view(shape)
            buffer = shared_buffer(shape, dtype)
            free = self._free_index(buffer.untyped_storage().nbytes())
            if free is None:
                return buffer
            self.state[free] = FREE
            if free == len(self.slots):
                self.slots.append(None)
            self._buffers_made += 1
            self.slots[free] = _Slot(buffer, self._buffers_made)
            return buffer.view(shape)

    def take_bytes(self, nbytes: int) -> torch.Tensor:
        """A 1-D uint8 shared buffer of `nbytes` (a raw batch):
        the start of a free slot of at least that size, else as `take` gives one. Sizes
        vary batch to batch, so a new slot has room to spare, and a free slot too small
        for the batch makes room for a larger one."""
        with self._lock:
            small = None
            for index, slot in enumerate(self.slots):
                if slot is None or not self._reusable(index, slot, None, torch.uint8):
                    continue
                if slot.buffer.numel() >= nbytes:
                    return slot.buffer[:nbytes]
                small = index if small is None else small
            if small is not None:
                self.slots[small] = None  # its place goes to a larger buffer
        room = -(-(nbytes + nbytes // 4) // 4096) * 4096
        return self.take((max(room, 1 << 16),))[:nbytes]

    def _reusable(self, index: int, slot: _Slot, shape: tuple[int, ...] | None,
                  dtype: torch.dtype) -> bool:
        if self.state[index] == GONE:  # given up by the main process: forget it
            self.slots[index] = None
            return False
        same = slot.buffer.dim() == 1 if shape is None else tuple(slot.buffer.shape) == shape
        return (self.state[index] == FREE and same and slot.buffer.dtype == dtype
                and slot.idle())

    def _free_index(self, nbytes: int) -> int | None:
        """Where a new slot goes (a forgotten one's place first), or None: pool full."""
        if None in self.slots:
            return self.slots.index(None)
        limit = max(MIN_SLOTS, min(MAX_SLOTS, POOL_BYTES // max(1, nbytes)))
        return len(self.slots) if len(self.slots) < limit else None

    def slot_of(self, images: torch.Tensor) -> int | None:
        """The slot whose buffer `images` views, or None (not pooled)."""
        if images.untyped_storage().nbytes() == 0:
            return None
        pointer = images.untyped_storage().data_ptr()
        for index, slot in enumerate(self.slots):
            if slot is not None and slot.storage.data_ptr() == pointer:
                return index
        return None

    def outgoing(self, slot: int, images: torch.Tensor) -> SlotImages:
        """How `images`, a view of the buffer in `slot`, leaves for the main process: its
        place in the buffer, with the buffer's file descriptor unless the main process
        holds this buffer already."""
        entry = self.slots[slot]
        if entry is None:
            raise RuntimeError(f"pool slot {slot} holds no buffer")
        handle = None
        if int(self.held[slot]) != entry.buffer_id:
            handle = DupFd(private.share_fd(entry.storage))
        return SlotImages(entry.buffer_id, handle, entry.storage.nbytes(),
                          int(images.storage_offset()), tuple(images.shape), images.stride(),
                          images.dtype)

    def sending(self, slot: int) -> None:
        """The batch in `slot` is about to leave for the main process: busy until freed.
        Only a free slot may leave (`collate` copies a batch whose slot is out)."""
        if self.state[slot] != FREE:
            raise RuntimeError(f"pool slot {slot} is already out (state {self.state[slot]})")
        self.state[slot] = BUSY


_POOL: SlotPool | None = None


def worker_pool() -> SlotPool | None:
    """This worker process's pool; None where recycling is off (another sharing strategy,
    or a torch without one of PRIVATE_NAMES)."""
    global _POOL
    strategy = torch.multiprocessing.get_sharing_strategy()  # type: ignore[no-untyped-call]
    if strategy != "file_descriptor" or not pool_supported():
        return None
    if _POOL is None or _POOL.pid != os.getpid():
        _POOL = SlotPool()
    return _POOL
