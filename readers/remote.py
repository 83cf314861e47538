"""Read a packed dataset behind a URL (s3://, file://, any fsspec protocol) through a disk cache.

    cache_dir/<url hash>-<index hash>/      a local mirror of the dataset, shards on demand
        index.json samples.npy keys.npy     fetched when the dataset object is created
        photos-00007.tar ...                fetched on first read; least recently used
                                            shards evicted beyond cache_bytes
        .locks/00007.use  .locks/00007.get  flock files: "in use" and "being fetched"

The mirror opens with the ordinary format readers; RemoteReader wraps the format's reader
and makes sure the shards a read needs are on disk first. Every file arrives under a
temporary name and is renamed once complete, so no process ever sees part of one.

All processes on a machine (DataLoader workers, DDP ranks) share one mirror, so a shard
is fetched once however many workers read from it:

- pinning: a process holds a shared flock on `NNNNN.use` of each shard it reads (its
  MAX_PINNED most recent ones); eviction takes that lock exclusively without waiting,
  so a pinned shard is never deleted under a reader.
- fetching: an exclusive flock on `NNNNN.get`; whoever gets it second finds the shard there.
- recency: a pin touches the file's mtime; eviction removes the oldest unpinned shards
  until the complete shards fit in `cache_bytes`. Pinned shards stay, so the disk can
  hold up to MAX_PINNED shards per reading process on top of `cache_bytes`.

Nothing here travels through pickle but the RemoteSource (a URL, options and paths); the
filesystem object and the lock descriptors live in the process that reads. Nothing is
ever written to the URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import queue
import shutil
import tempfile
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packer.core.index import INDEX_NAME, KEYS_NAME, SAMPLES_NAME, Index
from packer.dataset.remote import fetch, fetch_metadata, is_url, open_fs
from packer.formats.base import RecordReader
from readers.remote_fields import fetch_field_files

DEFAULT_DISK_CACHE_BYTES = 8 * 2**30
MAX_PINNED = 2  # shards a process keeps pinned (a span can cross one shard boundary)
PREFETCH = True  # fetch coming shards while one is read (scripts/bench_remote.py compares)
PREFETCH_SHARDS = 2  # shards fetched ahead, each by its own thread, within cache_bytes
PREFETCH_IDLE_S = 5.0  # an idle prefetch thread checks this often whether its cache lives
LOCKS = ".locks"


# Descriptors holding a fetch lock right now, in any thread. A fork copies them into the
# child, where nothing would ever close them: the child would keep the shard locked and
# wait forever on its own lock the day it fetches that shard. The child closes them.
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


def default_cache_dir() -> Path:
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"packer-cache-{user}"


@dataclass(frozen=True)
class RemoteSource:
    """Where a remote dataset lives and where this machine mirrors it (picklable)."""

    url: str
    folder: Path
    cache_bytes: int = DEFAULT_DISK_CACHE_BYTES
    storage_options: Mapping[str, Any] = field(default_factory=dict)


def open_remote(url: str, storage_options: Mapping[str, Any] | None = None,
                cache_dir: str | Path | None = None,
                cache_bytes: int | None = None) -> RemoteSource:
    """Mirror index.json and the per-sample table of `url` into the cache; no shard yet.

    The mirror folder is named after the URL and the index's content, so a dataset
    reconverted at the same URL gets a fresh mirror. index.json is written last.
    """
    budget = DEFAULT_DISK_CACHE_BYTES if cache_bytes is None else cache_bytes
    if budget < 0:
        raise ValueError(f"cache_bytes must be 0 or positive, not {budget}")
    options = dict(storage_options or {})
    staging = Path(cache_dir if cache_dir is not None else default_cache_dir()) / \
        f".incoming-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        raw = fetch_metadata(url, options, staging)
        extra = fetch_field_files(url, options, raw, staging)  # readers.remote_fields
        name = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16] + "-" \
            + hashlib.sha256(raw).hexdigest()[:16]
        folder = staging.parent / name
        if not (folder / INDEX_NAME).is_file():
            (folder / LOCKS).mkdir(parents=True, exist_ok=True)
            for table in (SAMPLES_NAME, KEYS_NAME, *extra):
                (folder / table).parent.mkdir(exist_ok=True)
                os.replace(staging / table, folder / table)
            (staging / INDEX_NAME).write_bytes(raw)
            os.replace(staging / INDEX_NAME, folder / INDEX_NAME)  # last: the mirror is usable
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RemoteSource(url.rstrip("/"), folder, budget, options)


class ShardCache:
    """This process's view of a mirror's shards: pin (fetching if needed), unpin, evict."""

    def __init__(self, source: RemoteSource, index: Index) -> None:
        self.source = source
        self.index = index
        self.pinned: OrderedDict[int, int] = OrderedDict()  # shard -> fd holding LOCK_SH
        self.num_fetched = 0
        self._fs: tuple[Any, str] | None = None
        self._fs_lock = threading.Lock()
        self._prefetcher: Prefetcher | None = None
        (source.folder / LOCKS).mkdir(parents=True, exist_ok=True)

    def _path(self, shard: int) -> Path:
        return self.source.folder / self.index.shards[shard].name

    def _lock(self, shard: int, kind: str) -> int:
        path = self.source.folder / LOCKS / f"{shard:05d}.{kind}"
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

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
        fd = self._lock(shard, "use")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # from here on, nobody evicts it
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
        fd = self._lock(shard, "get")
        with _FETCH_LOCKS_GUARD:
            _FETCH_LOCKS.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one fetch per shard at a time, machine-wide
            if self._complete(shard):
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
        finally:
            with _FETCH_LOCKS_GUARD:
                _FETCH_LOCKS.discard(fd)
            os.close(fd)

    def prefetch(self, shard: int) -> None:
        """Start fetching `shard` in the background, if it is missing and fits the budget.

        The reader finds it on disk when it gets there (or waits on the fetch lock for the
        rest of it). A failed prefetch is dropped: the reader's own fetch then reports it.
        """
        size = self.index.shards[shard].num_bytes
        pending = 0 if self._prefetcher is None else len(self._prefetcher.pending)
        if not PREFETCH or shard in self.pinned or self._complete(shard) or \
                self.source.cache_bytes < size * (len(self.pinned) + pending + 1):
            return
        if self._prefetcher is None or self._prefetcher.pid != os.getpid():
            self._prefetcher = Prefetcher(self._fetch)
        self._prefetcher.ask(shard)

    def _evict(self, keep: int) -> None:
        """Remove least recently used unpinned shards until the rest fit the budget."""
        present = []
        for shard in range(len(self.index.shards)):
            try:
                info = self._path(shard).stat()
            except FileNotFoundError:
                continue
            present.append((info.st_mtime_ns, shard, info.st_size))
        total = sum(size for _, _, size in present)
        for _, shard, size in sorted(present):
            if total <= self.source.cache_bytes:
                break
            if shard != keep and shard not in self.pinned and self._evict_one(shard):
                total -= size

    def _evict_one(self, shard: int) -> bool:
        fd = self._lock(shard, "use")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # another process reads it
            self._path(shard).unlink(missing_ok=True)
            return True
        finally:
            os.close(fd)

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
    """PREFETCH_SHARDS daemon threads per process that fetch shards ahead of the reader.

    Daemons, so an exiting worker never waits for a download; made anew in a forked
    child (threads do not survive fork), hence the pid. They hold their cache weakly and
    end within PREFETCH_IDLE_S once it is gone, so a dataset dropped and made again does
    not leave threads behind.
    """

    def __init__(self, fetch: Callable[[int], None]) -> None:
        self.pid = os.getpid()
        self.queue: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.pending: set[int] = set()
        self._fetch = weakref.WeakMethod(fetch)
        for _ in range(PREFETCH_SHARDS):  # a far store's latency is waited out in parallel
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


class RemoteReader:
    """A RecordReader over a mirror: pins the shards a read needs, then reads locally.

    When a shard is unpinned the format reader is closed (it reopens lazily), so it never
    holds a descriptor of a shard that eviction may delete.
    """

    def __init__(self, inner: RecordReader, cache: ShardCache) -> None:
        self.inner = inner
        self.cache = cache
        self.index = cache.index

    def _trim(self) -> None:
        if self.cache.trim():
            self.inner.close()

    def read(self, i: int) -> bytes:
        self.cache.pin(self.index.shard_of(i))
        data = self.inner.read(i)
        self._trim()
        return data

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        if not len(indices):
            return []
        shards = np.searchsorted(self.index.shard_starts, np.asarray(indices), side="right") - 1
        for shard in sorted({int(s) for s in shards}):
            self.cache.pin(shard)
        data = self.inner.read_many(indices)
        self._trim()
        return data

    def fields(self, i: int, names: Sequence[str] | None = None) -> dict[str, object]:
        """Sample i's fields (readers.fields), read as its bytes are: its shard pinned."""
        self.cache.pin(self.index.shard_of(i))
        values = self.inner.fields(i, names)
        self._trim()
        return values

    def prefetch(self, ranges: Sequence[Sequence[int]]) -> None:
        """Fetch in the background the shards of the coming (start, stop, ...) ranges:
        the first PREFETCH_SHARDS of them that are not on disk yet."""
        wanted: list[int] = []
        for start, stop, *_ in ranges:
            if start >= stop:
                continue
            for shard in (self.index.shard_of(start), self.index.shard_of(stop - 1)):
                if shard not in wanted and shard not in self.cache.pinned:
                    wanted.append(shard)
            if len(wanted) >= PREFETCH_SHARDS:
                break
        for shard in wanted[:PREFETCH_SHARDS]:
            self.cache.prefetch(shard)

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        i = start
        while i < stop:
            shard = self.index.shard_of(i)
            end = min(stop, int(self.index.shard_starts[shard + 1]))
            if end < stop:  # the span goes on into the next shard(s)
                self.prefetch([(end, stop)])
            self.cache.pin(shard)
            yield from self.inner.read_range(i, end)
            self._trim()
            i = end

    def close(self) -> None:
        self.inner.close()
        self.cache.close()


def remote_reader(open_reader: Callable[[], RecordReader], source: RemoteSource,
                  index: Index) -> RemoteReader:
    """Wrap the format's reader of the mirror, opened by `open_reader`.

    A one-file format (lmdb, hdf5, npy) opens its file right away, so its only shard is
    fetched and pinned first, for as long as the reader lives.
    """
    cache = ShardCache(source, index)
    if len(index.shards) == 1:
        cache.pin(0)
    try:
        return RemoteReader(open_reader(), cache)
    except BaseException:
        cache.close()
        raise


def remote_source(path: str | Path, storage_options: Mapping[str, Any] | None,
                  cache_dir: str | Path | None, cache_bytes: int | None) -> RemoteSource | None:
    """A RemoteSource when `path` is a URL; None (and no remote option given) for a folder."""
    if isinstance(path, str) and is_url(path):
        return open_remote(path, storage_options, cache_dir, cache_bytes)
    if storage_options is not None or cache_dir is not None or cache_bytes is not None:
        raise ValueError(f"{path}: storage_options, cache_dir and the disk cache size apply to "
                         "a URL (s3://..., file://...), not to a local folder")
    return None
