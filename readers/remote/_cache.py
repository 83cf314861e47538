"""ShardCache: this process's view of a mirror's shards (pin, fetch, evict), and prefetching."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packer.core.index import Index
from packer.dataset.remote import fetch, open_fs
from readers.remote._eviction import Present, victims
from readers.remote._locks import ShardLocks
from readers.remote._mirror import RemoteSource

MAX_PINNED = 2  # shards a process keeps pinned (a span can cross one shard boundary)
PREFETCH_IDLE_S = 5.0  # an idle prefetch thread checks this often whether its cache lives


class ShardCache:
    """This process's view of a mirror's shards: pin (fetching if needed), unpin, evict."""

    def __init__(self, source: RemoteSource, index: Index) -> None:
        self.source = source
        self.index = index
        self.pinned: OrderedDict[int, int] = OrderedDict()  # shard -> fd holding LOCK_SH
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
            fetch(fs, f"{root}/{info.name}", path, self.source.url, info.num_bytes, info.sha256)
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
        if self._prefetcher is None or self._prefetcher.pid != os.getpid():
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
        """Unpin all but the MAX_PINNED most recent shards; True if any was unpinned.

        What was unpinned may now be evicted, if the cache is over its budget (checked by
        a process that fetches: one reading a warm cache never scans it).
        """
        if len(self.pinned) <= MAX_PINNED:
            return False
        while len(self.pinned) > MAX_PINNED:
            os.close(self.pinned.popitem(last=False)[1])
        if self.num_fetched:
            self._evict(keep=next(reversed(self.pinned)))
        return True

    def close(self) -> None:
        """Unpin everything. (Closing is enough: in a forked child the parent keeps its pins.)"""
        for fd in self.pinned.values():
            os.close(fd)
        self.pinned.clear()

    def __del__(self) -> None:  # a dataset dropped without close(): release its pins
        with contextlib.suppress(Exception):
            self.close()


class Prefetcher:
    """`threads` daemon threads per process that fetch shards ahead of the reader.

    Daemons, so an exiting worker never waits for a download; made anew in a forked
    child (threads do not survive fork), hence the pid. They hold their cache weakly and
    end within PREFETCH_IDLE_S once it is gone, so a dataset dropped and made again does
    not leave threads behind.
    """

    def __init__(self, fetch: Callable[[int], None], threads: int) -> None:
        self.pid = os.getpid()
        self.queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.pending: set[int] = set()
        self._fetch = weakref.WeakMethod(fetch)
        for _ in range(threads):  # a far store's latency is waited out in parallel
            threading.Thread(target=self._run, name="packer-prefetch", daemon=True).start()

    def ask(self, shard: int) -> None:
        if shard not in self.pending:
            self.pending.add(shard)
            self.queue.put(shard)

    def _run(self) -> None:
        while True:
            try:
                shard = self.queue.get(timeout=PREFETCH_IDLE_S)
            except queue.Empty:
                if self._fetch() is None:  # the cache is gone: so is the work
                    return
                continue
            fetch = self._fetch()
            if fetch is None:
                return
            try:
                fetch(shard)
            except Exception:  # the reader fetches it again and reports why
                pass
            finally:
                del fetch
                self.pending.discard(shard)

