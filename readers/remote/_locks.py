"""The flock files of a mirror's shards: "in use" and "being fetched".

Descriptors holding a fetch lock right now, in any thread, are tracked: a fork copies them
into the child, where nothing would ever close them, so the child would keep the shard
locked and wait forever on its own lock the day it fetches that shard. The child closes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

LOCKS = ".locks"

_FETCH_LOCKS: set[int] = set()
_FETCH_LOCKS_GUARD = threading.Lock()


def _close_inherited_fetch_locks() -> None:
    global _FETCH_LOCKS_GUARD
    _FETCH_LOCKS_GUARD = threading.Lock()  # a fetching thread may have held it at the fork
    for fd in _FETCH_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _FETCH_LOCKS.clear()


os.register_at_fork(after_in_child=_close_inherited_fetch_locks)


class ShardLocks:
    """The lock files of one mirror folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder / LOCKS
        self.folder.mkdir(parents=True, exist_ok=True)

    def _open(self, shard: int, kind: str) -> int:
        path = self.folder / f"{shard:05d}.{kind}"
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def pin(self, shard: int) -> int:
        """A descriptor holding the shard's shared "in use" lock: close it to unpin."""
        fd = self._open(shard, "use")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # from here on, nobody evicts it
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def fetching(self, shard: int) -> Iterator[None]:
        """Hold the shard's fetch lock: one fetch per shard at a time, machine-wide."""
        fd = self._open(shard, "get")
        with _FETCH_LOCKS_GUARD:
            _FETCH_LOCKS.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            with _FETCH_LOCKS_GUARD:
                _FETCH_LOCKS.discard(fd)
            os.close(fd)

    @contextlib.contextmanager
    def unused(self, shard: int) -> Iterator[bool]:
        """True (held) when no process has the shard pinned; never waits."""
        fd = self._open(shard, "use")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False  # another process reads it
                return
            yield True
        finally:
            os.close(fd)
