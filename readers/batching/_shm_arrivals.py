"""The main process's side of the batch pool (readers.batching._shm_pool): a pooled batch
arrives, is mapped from its slot's buffer, and frees the slot when the last view of it
dies; a fork while the process keeps batches gives their slots up.

The pool's module docstring says why and when a slot is safe to reuse.
"""

from __future__ import annotations

import collections
import mmap
import os
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from readers.batching._columns import tensor_of, unpacked
from readers.batching._shm_pool import FREE, GONE, KNOWN_STATES, STATE_BYTES, SlotImages, views

Rebuild = tuple[Any, tuple[Any, ...]]  # (callable, args): a batch's head from its buffer


_LOCK = threading.RLock()  # the pin-memory thread unpickles too
_STATES: collections.OrderedDict[str, npt.NDArray[np.uint8]] = collections.OrderedDict()
_LIVE: dict[int, tuple[weakref.finalize[Any, Any], npt.NDArray[np.uint8], int]] = {}
_FDS: dict[tuple[str, int], tuple[int, int]] = {}  # (token, slot) -> (buffer id, fd)


def arrived(images: SlotImages, tail: list[Any], by_value: bool, token: str,
            state: Any, slot: int, rebuild: Rebuild | None = None) -> list[Any]:
    """In the main process: the plain batch, its slot freed once no view of `images` is
    left. `state`: the worker's state array (a DupFd), with its first batch only."""
    tail = [unpacked(value) for value in tail]
    if by_value:
        tail[0] = tensor_of(*tail[0])
    _watch_forks()
    known = _known_state(token, state)
    head = _slot_images(images, token, slot, known)
    return [head if rebuild is None else rebuild[0](head, *rebuild[1]), *tail]


def _known_state(token: str, state: Any) -> npt.NDArray[np.uint8] | None:
    """The state array of the worker `token` (mapped when it comes with a batch)."""
    with _LOCK:
        if state is not None:  # a new worker: forget the ones that have ended
            _forget_ended_workers()
            fd = state.detach()
            try:
                _STATES[token] = np.frombuffer(mmap.mmap(fd, STATE_BYTES), dtype=np.uint8)
            finally:
                os.close(fd)
        known = _STATES.get(token)
        if known is None:
            return None
        _STATES.move_to_end(token)
        while len(_STATES) > KNOWN_STATES:
            _close_fds(_STATES.popitem(last=False)[0])
        return known


def _slot_images(images: SlotImages, token: str, slot: int,
                 known: npt.NDArray[np.uint8] | None) -> torch.Tensor:
    """The head of a batch, mapped afresh from its slot's buffer: a mapping of its own,
    whose end (the last view of the batch gone) frees the slot."""
    arrived = None if images.handle is None else images.handle.detach()
    with _LOCK:
        key = (token, slot)
        if arrived is not None:
            old = _FDS.pop(key, None)
            if old is not None:
                os.close(old[1])
            _FDS[key] = (images.buffer_id, arrived)
            if known is not None:
                views(known)[1][slot] = images.buffer_id
        entry = _FDS.get(key)
        if entry is None or entry[0] != images.buffer_id:
            raise RuntimeError(f"a batch from DataLoader worker {token.partition('-')[0]} "
                               "arrived after its shared memory was released")
        mapping = mmap.mmap(entry[1], images.nbytes)
    whole = torch.frombuffer(mapping, dtype=images.dtype)
    if known is not None:  # the slot is freed when `mapping`, which the storage holds, dies
        address = whole.data_ptr()
        done = weakref.finalize(mapping, _free, os.getpid(), known, slot, address)
        with _LOCK:
            _LIVE[address] = (done, known, slot)
    return whole.as_strided(images.shape, images.stride, images.offset)


def _close_fds(token: str) -> None:
    """Close the buffers' file descriptors kept for the worker `token`."""
    for key in [key for key in _FDS if key[0] == token]:
        os.close(_FDS.pop(key)[1])


def _forget_ended_workers() -> None:
    """Drop the state arrays of workers that have exited (each holds a mapping): no batch
    will come from them again, and their batches' finalizers keep what they need.
    Tokens start with the worker's pid; a new process reusing the pid has another token."""
    for token in list(_STATES):
        try:
            os.kill(int(token.partition("-")[0]), 0)
        except ProcessLookupError:
            del _STATES[token]
            _close_fds(token)
        except (PermissionError, ValueError):
            continue


def _free(pid: int, state: npt.NDArray[np.uint8], slot: int, key: int) -> None:
    """Mark the slot free, only in the process that received the batch (not a fork of it)."""
    if os.getpid() != pid:
        return
    with _LOCK:
        _LIVE.pop(key, None)
    state[slot] = FREE


def _before_fork() -> None:
    """Batches kept across a fork: the child maps them too, so their slots are never
    reused (GONE)."""
    _LOCK.acquire()
    for key in list(_LIVE):
        entry = _LIVE.pop(key, None)
        if entry is not None and entry[0].detach() is not None:
            entry[1][entry[2]] = GONE


def _in_child() -> None:
    global _LOCK
    _LIVE.clear()
    for _, fd in _FDS.values():
        os.close(fd)
    _FDS.clear()
    _LOCK = threading.RLock()


_WATCHING: list[bool] = []


def _watch_forks() -> None:
    """Once, in the main process: a fork gives up the batches kept."""
    if _WATCHING:
        return
    _WATCHING.append(True)
    os.register_at_fork(before=_before_fork, after_in_parent=_LOCK.release,
                        after_in_child=_in_child)
