"""ShardCache: this process's view of a mirror's shards (pin, fetch, evict), and prefetching."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packer.core.index import Index
from packer.dataset.urls import fetch, open_fs
from readers.remote._eviction import Present, victims
from readers.remote._locks import ShardLocks
from readers.remote._mirror import RemoteSource

MAX_PINNED = 2  # shards a process keeps pinned (a span can cross one shard boundary)


class ShardCache:
    """This process's view of a mirror's shards: pin (fetching if needed), unpin, evict."""

    def __init__(self, source: RemoteSource, index: Index) -> None:
        self.source = source
        self.index = index
        self.pinned: OrderedDict[int, int] = OrderedDict()  # shard -> fd holding LOCK_SH
        self.max_pinned = MAX_PINNED  # every shard, for a reader that opens them all
        self.num_fetched = 0
        self.locks = ShardLocks(source.folder)
        self._fs: tuple[Any, str] | None = None
        self._fs_lock = threading.Lock()
        self._prefetcher: Prefetcher | None = None

    def _path(self, shard: int) -> Path:
        return self.source.folder / self.index.shards[shard].name

    def _complete(self, shard: int) -> bool:
        try:
            return self._path(shard).stat().st_size == self.index.shards[shard].num_bytes
        except FileNotFoundError:
            return False

    def pin(self, shard: int) -> None:
        """Make sure the shard is on disk and stays there until unpinned."""
        if shard in self.pinned:
            self.pinned.move_to_end(shard)
            return
        fd = self.locks.pin(shard)
        try:
            if not self._complete(shard):
                self._fetch(shard)
            os.utime(self._path(shard))
        except BaseException:
            os.close(fd)
            raise
        self.pinned[shard] = fd
        if self.num_fetched:
            self._evict(keep=shard)

    def _fetch(self, shard: int) -> None:
        with self.locks.fetching(shard):
            if self._complete(shard):  # fetched by whoever held the lock before
                return
            path = self._path(shard)
            path.parent.mkdir(parents=True, exist_ok=True)
            for stale in path.parent.glob(f"{path.name}.*.partial"):  # a killed fetch
                stale.unlink(missing_ok=True)
            with self._fs_lock:  # the prefetch thread fetches too
                if self._fs is None:
                    self._fs = open_fs(self.source.url, self.source.storage_options)
                fs, root = self._fs
            info = self.index.shards[shard]
            fetch(fs, f"{root}/{info.name}", path, self.source.url, info.num_bytes, info.sha256,
                  info.pieces)
            self.num_fetched += 1

    def prefetch(self, shard: int) -> None:
        """Start fetching `shard` in the background, if it is missing and fits the budget.

        The reader finds it on disk when it gets there (or waits on the fetch lock for the
        rest of it). A failed prefetch is dropped: the reader's own fetch then reports it.
        """
        size = self.index.shards[shard].num_bytes
        pending = 0 if self._prefetcher is None else len(self._prefetcher.pending)
        if not self.source.prefetch_shards or shard in self.pinned or self._complete(shard) \
                or self.source.cache_bytes < size * (len(self.pinned) + pending + 1):
            return
        if self._prefetcher is None or self._prefetcher.pid != os.getpid() \
                or self._prefetcher.stopped:
            self._prefetcher = Prefetcher(self._fetch, self.source.prefetch_shards)
        self._prefetcher.ask(shard)

    def _evict(self, keep: int) -> None:
        """Remove least recently used unpinned shards until the rest fit the budget."""
        present = []
        for shard in range(len(self.index.shards)):
            try:
                info = self._path(shard).stat()
            except FileNotFoundError:
                continue
            present.append(Present(info.st_mtime_ns, shard, info.st_size))
        busy = {keep, *self.pinned}  # plus, as found, shards another process reads
        while chosen := victims(present, busy, self.source.cache_bytes):
            for shard in chosen:
                if not self._evict_one(shard):
                    busy.add(shard)  # the next-oldest takes its place
                    break
                present = [entry for entry in present if entry.shard != shard]
            else:
                return

    def _evict_one(self, shard: int) -> bool:
        with self.locks.unused(shard) as unused:
            if unused:
                self._path(shard).unlink(missing_ok=True)
            return unused

    def trim(self) -> bool:
        """Unpin all but the `max_pinned` most recent shards; True if any was unpinned.

        What was unpinned may now be evicted, if the cache is over its budget (checked by
        a process that fetches: one reading a warm cache never scans it).
        """
        if len(self.pinned) <= self.max_pinned:
            return False
        while len(self.pinned) > self.max_pinned:
            os.close(self.pinned.popitem(last=False)[1])
        if self.num_fetched:
            self._evict(keep=next(reversed(self.pinned)))
        return True

    def stop_prefetch(self) -> None:
        """End this process's prefetch threads and wait for them (the pass that wanted
        them is over); the next prefetch starts new ones."""
        if self._prefetcher is not None:
            self._prefetcher.stop()

    def _unpin_all(self) -> None:
        for fd in self.pinned.values():
            os.close(fd)
        self.pinned.clear()

    def close(self) -> None:
        """Unpin everything and stop prefetching. (Closing is enough: in a forked child the
        parent keeps its pins.)"""
        self._unpin_all()
        self.stop_prefetch()

    def __del__(self) -> None:  # dropped without close(): release its pins, halt its threads
        with contextlib.suppress(Exception):
            self._unpin_all()
            if self._prefetcher is not None:
                self._prefetcher.halt()  # not waited for here: see Prefetcher


class Prefetcher:
    """`threads` daemon threads of this process that fetch shards ahead of the reader.

    They end only when told, and are waited for: `stop()` when the pass that asked for
    them ends or the cache closes, and before this process forks (`_stop_before_fork`).
    Why: CPython before 3.12 can hang a forked child in os.fork() when a thread of the
    parent starts or ends at that moment, and a DataLoader forks its workers whenever
    the user starts an epoch. A cache dropped without close() only sends them the word
    to end (`halt`); whichever fork or stop comes next waits for them.
    Daemons, so an exiting process never waits for a download; made anew in a forked
    child (threads do not survive fork), hence the pid.
    """

    def __init__(self, fetch: Callable[[int], None], threads: int) -> None:
        self.pid = os.getpid()
        self.queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.pending: set[int] = set()
        self.stopped = False
        self._fetch = weakref.WeakMethod(fetch)
        self._threads = [threading.Thread(target=self._run, name="packer-prefetch", daemon=True)
                         for _ in range(threads)]  # a far store's latency waited out in parallel
        with _GUARD:  # never while this process forks
            _LIVE.difference_update([ended for ended in list(_LIVE) if ended.ended()])
            _LIVE.add(self)
            for thread in self._threads:
                thread.start()

    def ask(self, shard: int) -> None:
        if shard not in self.pending and not self.stopped:
            self.pending.add(shard)
            self.queue.put(shard)

    def ended(self) -> bool:
        """Whether every thread has ended (halted ones end soon after, unwaited for)."""
        return not any(thread.is_alive() for thread in self._threads)

    def halt(self) -> None:
        """Drop the shards not begun and tell every thread to end, without waiting."""
        self.stopped = True
        with contextlib.suppress(queue.Empty):
            while True:
                self.pending.discard(self.queue.get_nowait())
        for _ in self._threads:
            self.queue.put(STOP)

    def stop(self, timeout: float | None = None) -> bool:
        """`halt`, then wait for the threads to end (a fetch under way is finished first),
        at most `timeout` seconds each; whether they all ended.

        In a forked child, or in a prefetch thread (a garbage collection there may drop
        a cache or end a pass), it only halts: the first has no threads to wait for, the
        second must not wait for itself nor for _GUARD, which a fork may hold while it
        waits for this very thread.
        """
        if self.pid != os.getpid() or getattr(_THIS_THREAD, "prefetching", False):
            self.halt()
            return False
        with _GUARD:
            self.halt()
            for thread in self._threads:
                thread.join(timeout)
            if not self.ended():
                return False
            _LIVE.discard(self)
            return True

    def _run(self) -> None:
        _THIS_THREAD.prefetching = True
        while (shard := self.queue.get()) != STOP:
            fetch = self._fetch()
            try:
                if fetch is not None:
                    fetch(shard)
            except Exception:  # the reader fetches it again and reports why
                pass
            finally:
                del fetch
                self.pending.discard(shard)


STOP = -1  # what a prefetch thread reads as "end now"
_GUARD = threading.RLock()  # held while prefetch threads start, stop, and while forking
_LIVE: set[Prefetcher] = set()  # this process's prefetchers whose threads may still run
_THIS_THREAD = threading.local()  # .prefetching: set in prefetch threads
FORK_WAIT_S = 60.0  # how long a fork waits for the prefetch threads to end
LOG = logging.getLogger("readers.remote")
_WARNED: list[bool] = []


def _stop_before_fork() -> None:
    """Before this process forks: end every prefetch thread of it and wait for them, and
    start none until the fork is done (Prefetcher says why).

    A thread still fetching after FORK_WAIT_S (a slow store, or a thread stuck on a lock
    that another fork hook holds) is left running, with a warning, once per process.
    """
    _GUARD.acquire()
    if not all([prefetcher.stop(FORK_WAIT_S) for prefetcher in list(_LIVE)]) and not _WARNED:
        _WARNED.append(True)
        LOG.warning("%d shard prefetch thread(s) still running when this process forks: "
                    "on Python < 3.12 a fork can hang when a thread ends at that moment. "
                    "DataLoader(multiprocessing_context='forkserver') avoids it.",
                    sum(not prefetcher.ended() for prefetcher in _LIVE))


def _after_fork_in_child() -> None:
    global _GUARD
    _GUARD = threading.RLock()
    _LIVE.clear()


def _after_fork_in_parent() -> None:
    _GUARD.release()


os.register_at_fork(before=_stop_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)
