"""The main process's side of the batch pool (readers.batching._shm_pool): a pooled batch
arrives, is mapped from its slot's buffer, and frees the slot when its storage dies; a
batch that leaves the process (pickled, or held across a fork) gives its slot up.

The pool's module docstring says why and when a slot is safe to reuse.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from readers.batching import _torch_private as private
from readers.batching._columns import tensor_of, unpacked
from readers.batching._shm_pool import FREE, GONE, KNOWN_STATES, SlotImages, views

Rebuild = tuple[Any, tuple[Any, ...]]  # (callable, args): a batch's head from its buffer


_LOCK = threading.RLock()  # the pin-memory thread unpickles too
_STATES: collections.OrderedDict[str, npt.NDArray[np.uint8]] = collections.OrderedDict()
_LIVE: dict[int, tuple[weakref.finalize[Any, Any], npt.NDArray[np.uint8], int]] = {}
_FDS: dict[tuple[str, int], tuple[int, int]] = {}  # (token, slot) -> (buffer id, fd)


def arrived(images: torch.Tensor | SlotImages, tail: list[Any], by_value: bool, token: str,
             state: torch.Tensor | None, slot: int, rebuild: Rebuild | None = None
             ) -> list[Any]:
    """In the main process: the plain batch, its slot freed once `images`' storage dies."""
    tail = [unpacked(value) for value in tail]
    if by_value:
        tail[0] = tensor_of(*tail[0])
    _watch_hand_offs()
    known = _known_state(token, state)
    if isinstance(images, SlotImages):
        images = _slot_images(images, token, slot, known)
    _track(images, known, slot)
    head = images if rebuild is None else rebuild[0](images, *rebuild[1])
    return [head, *tail]


def _known_state(token: str, state: torch.Tensor | None) -> npt.NDArray[np.uint8] | None:
    """The state array of the worker `token` (registered when it comes with a batch)."""
    with _LOCK:
        if state is not None:  # a new worker: forget the ones that have ended
            _forget_ended_workers()
            _STATES[token] = state.numpy()
        known = _STATES.get(token)
        if known is None:
            return None
        _STATES.move_to_end(token)
        while len(_STATES) > KNOWN_STATES:
            _close_fds(_STATES.popitem(last=False)[0])
        return known


def _slot_images(images: SlotImages, token: str, slot: int,
                 known: npt.NDArray[np.uint8] | None) -> torch.Tensor:
    """The head of a batch, mapped from its slot's buffer: storage of its own, so that
    its death frees the slot as with a tensor torch sent."""
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
        fd = os.dup(entry[1])
    try:
        storage = private.storage_from_fd(fd, images.nbytes)
    finally:
        os.close(fd)
    view = torch.empty(0, dtype=images.dtype)
    return view.set_(storage, images.offset, images.shape, images.stride)


def _track(images: torch.Tensor, known: npt.NDArray[np.uint8] | None, slot: int) -> None:
    """Tie the slot's freeing to the life of `images`' storage in this process."""
    if known is None:
        return
    with _LOCK:
        storage = images.untyped_storage()
        key = storage.data_ptr()
        if key in _LIVE:  # the same storage again: its finalizer covers both
            return
        done = weakref.finalize(storage, _free, os.getpid(), known, slot, key)
        _LIVE[key] = (done, known, slot)


def _close_fds(token: str) -> None:
    """Close the buffers' file descriptors kept for the worker `token`."""
    for key in [key for key in _FDS if key[0] == token]:
        os.close(_FDS.pop(key)[1])


def _forget_ended_workers() -> None:
    """Drop the state arrays of workers that have exited (each holds a file descriptor):
    no batch will come from them again, and their batches' finalizers keep what they need.
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


def _give_up(key: int) -> None:
    """The batch at `key` leaves for another process: its slot is never reused (GONE)."""
    with _LOCK:
        entry = _LIVE.pop(key, None)
    if entry is not None and entry[0].detach() is not None:
        entry[1][entry[2]] = GONE


def _give_up_all() -> None:
    for key in list(_LIVE):
        _give_up(key)


def _before_fork() -> None:
    _LOCK.acquire()
    _give_up_all()


def _in_child() -> None:
    global _LOCK
    _LIVE.clear()
    for _, fd in _FDS.values():
        os.close(fd)
    _FDS.clear()
    _LOCK = threading.RLock()


_WATCHING: list[bool] = []


def _watch_hand_offs() -> None:
    """Once, in the main process: pickling or forking gives up the batches it reaches."""
    if _WATCHING:
        return
    _WATCHING.append(True)
    os.register_at_fork(before=_before_fork, after_in_parent=_LOCK.release,
                        after_in_child=_in_child)
    for kind in (torch.Tensor, torch.UntypedStorage):
        reducer = private.tensor_reducer(kind)
        if reducer is not None:
            ForkingPickler.register(kind, _giving_up(reducer))


def _giving_up(reducer: Any) -> Any:
    def reduce(obj: Any) -> Any:
        if _LIVE:
            try:
                storage = obj.untyped_storage() if isinstance(obj, torch.Tensor) else obj
                key = storage.data_ptr()
            except (RuntimeError, NotImplementedError):  # sparse, meta: never pooled
                key = None
            if key is not None:
                _give_up(key)
        return reducer(obj)

    return reduce
