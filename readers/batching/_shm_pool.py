"""Recycled shared memory for batches leaving a DataLoader worker (used by `collate`).

Why: a worker sends each batch to the main process in shared memory. torch allocates it
fresh for every batch, and touching those new pages (a fault and a zeroed page each
4 KiB) costs more than copying the pixels into them. A worker that gathers into buffers
it allocated before skips that, and sends each batch's labels inside the pickle instead
of in another new piece of shared memory (a file descriptor handed over each time).
npy batches are gathered straight into such a buffer; other batches of equal-sized
tensors (decoded JPEGs) are stacked into one, which is what default_collate does into
fresh memory.

Public ground: a buffer is an anonymous shared memory file (`os.memfd_create`) mapped
with `mmap`; a batch is a tensor over the mapping from `torch.frombuffer`, whose storage
holds one reference to the mapping object for as long as any view of it lives.

Safety: a buffer is reused only when nothing views it any more, in either process.
- In the worker: the Python reference count of the slot's mapping object is back to the
  pool's own (a sample, a cached batch, a batch not yet pickled each hold one through
  their storage).
- In the main process: the worker marks the slot busy when it sends the batch; the main
  process maps the slot's file afresh for each batch, and a finalizer on that mapping
  object (alive while any view of the batch is) marks the slot free in a small state
  array both processes map.
- Beyond the main process: torch moves a tensor it pickles for another process
  (a multiprocessing queue, a Process argument) into shared memory of its own, so the
  batch stops viewing the slot, which is then free; a fork while the main process holds
  batches gives their slots up (GONE): the worker forgets those buffers, which live on as
  long as anyone maps them.
A batch that cannot be tracked (its list was rebuilt in the worker, the state array
never arrived) keeps its slot busy; once every slot is busy the worker falls back to a
fresh buffer per batch, as torch does: slower, never wrong.

Hand-over: a slot's file descriptor crosses to the main process once, with the first
batch sent from it (torch hands one over for every batch, through a socket and a thread
in each process); the state array also records which buffer of each slot the main
process holds.

Limits: Linux (`memfd_create`) with torch's default "file_descriptor" sharing strategy;
elsewhere batches travel as torch moves any tensor. Each worker keeps up to POOL_BYTES
mapped.
"""

from __future__ import annotations

import math
import mmap
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

POOL_BYTES = 96 << 20  # per worker: enough for the DataLoader's prefetched batches
MIN_SLOTS = 2
MAX_SLOTS = 16
STATE_SLOTS = 16  # room in the state array: at least MAX_SLOTS
STATE_BYTES = STATE_SLOTS * 9  # a state byte and the mapped buffer id (int64) a slot
FREE, BUSY, GONE = 0, 1, 2
KNOWN_STATES = 64  # state arrays the main process remembers (one per worker lifetime)


def shared_buffer(shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialized tensor in torch's shared memory, as default_collate makes in
    workers."""
    shared: torch.Tensor = torch.empty(shape, dtype=dtype).share_memory_()  # type: ignore[no-untyped-call]
    return shared


def shared_file(nbytes: int) -> tuple[int, mmap.mmap]:
    """A new anonymous shared memory file of `nbytes` and its mapping."""
    fd = os.memfd_create("readers-batch", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        return fd, mmap.mmap(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise


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
    return state[:STATE_SLOTS], state[STATE_SLOTS:].view(np.int64)


class _Slot:
    """One recycled buffer: its file, its mapping, and the pool's own references to it."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, nbytes: int,
                 buffer_id: int) -> None:
        self.nbytes = nbytes
        self.fd, self.map = shared_file(nbytes)
        self.buffer_id = buffer_id
        self.buffer = self.view(shape, dtype)  # the shape and dtype it was made for
        self.address = self.buffer.data_ptr()
        self.own_references = sys.getrefcount(self.map)

    def view(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A new tensor over the start of the buffer: storage of its own, which holds the
        mapping for as long as any view of it lives."""
        return torch.frombuffer(self.map, dtype=dtype, count=math.prod(shape)).view(shape)

    def idle(self) -> bool:
        """Nothing in this process views the buffer but the pool's own tensor."""
        return sys.getrefcount(self.map) == self.own_references


class SlotPool:
    """A worker's buffers, and the state array through which the main process frees them."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = f"{self.pid}-{secrets.token_hex(8)}"
        self.state_fd, self.state_map = shared_file(STATE_BYTES)
        self.state, self.mapped = views(np.frombuffer(self.state_map, dtype=np.uint8))
        self.slots: list[_Slot | None] = []  # None: given up, its place free for a new one
        self.state_sent = False
        self._lock = threading.Lock()
        self._buffers_made = 0

    @property
    def buffers(self) -> list[torch.Tensor]:
        """The buffers the pool holds now."""
        return [slot.buffer for slot in self.slots if slot is not None]

    def state_handle(self) -> Any:
        """The state array's file descriptor, picklable, the first time it is asked for;
        None after."""
        if self.state_sent:
            return None
        self.state_sent = True
        return DupFd(self.state_fd)

    def take(self, shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        """A shared buffer of `shape`: a slot nobody views, a new slot, or an unpooled one.

        The result is a fresh view, so the slot counts as in use for as long as the
        caller (or anything made from it) holds it.
        """
        with self._lock:
            for index, slot in enumerate(self.slots):
                if slot is not None and self._reusable(index, slot, shape, dtype):
                    return slot.view(shape, dtype)
            nbytes = max(1, math.prod(shape)) * dtype.itemsize
            free = self._free_index(nbytes)
            if free is None:
                return shared_buffer(shape, dtype)
            self.state[free] = FREE
            if free == len(self.slots):
                self.slots.append(None)
            self._buffers_made += 1
            slot = _Slot(shape, dtype, nbytes, self._buffers_made)
            self.slots[free] = slot
            return slot.view(shape, dtype)

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
                if slot.nbytes >= nbytes:
                    return slot.view((nbytes,), torch.uint8)
                small = index if small is None else small
            if small is not None:
                self._forget(small)  # its place goes to a larger buffer
        room = -(-(nbytes + nbytes // 4) // 4096) * 4096
        return self.take((max(room, 1 << 16),))[:nbytes]

    def _reusable(self, index: int, slot: _Slot, shape: tuple[int, ...] | None,
                  dtype: torch.dtype) -> bool:
        if self.state[index] == GONE:  # given up by the main process: forget it
            self._forget(index)
            return False
        buffer = slot.buffer
        same = buffer.dim() == 1 if shape is None else tuple(buffer.shape) == shape
        return (self.state[index] == FREE and same and buffer.dtype == dtype
                and slot.idle())

    def _forget(self, index: int) -> None:
        """Forget the buffer here; views of it keep the mapping until they die."""
        slot = self.slots[index]
        if slot is not None:
            os.close(slot.fd)
        self.slots[index] = None

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
            if slot is not None and slot.address == pointer:
                return index
        return None

    def outgoing(self, slot: int, images: torch.Tensor) -> SlotImages:
        """How `images`, a view of the buffer in `slot`, leaves for the main process: its
        place in the buffer, with the buffer's file descriptor unless the main process
        holds this buffer already."""
        entry = self.slots[slot]
        if entry is None:
            raise RuntimeError(f"pool slot {slot} holds no buffer")
        handle = DupFd(entry.fd) if int(self.mapped[slot]) != entry.buffer_id else None
        return SlotImages(entry.buffer_id, handle, entry.nbytes,
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
    or no anonymous shared memory files)."""
    global _POOL
    strategy = torch.multiprocessing.get_sharing_strategy()  # type: ignore[no-untyped-call]
    if strategy != "file_descriptor" or not hasattr(os, "memfd_create"):  # Linux only
        return None
    if _POOL is None or _POOL.pid != os.getpid():
        _POOL = SlotPool()
    return _POOL
