"""Per-process handles of packed datasets: one reader per folder per process, shared by
every dataset on it, closed in a forked child at once and reopened on first read.

Shared because py-lmdb refuses to open an environment twice in one process; keyed by the
folder and the version of its index.json, so a dataset reconverted in place is not served
by the reader of the old one. Handles never travel through pickle (readers.datasets).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import cast

from packer import formats
from packer.core.index import INDEX_NAME, open_dataset
from packer.formats.base import RecordReader
from readers.batching.collate import Gatherer
from readers.cache import CachedReader
from readers.remote import RemoteSource, remote_reader

__all__ = ["Handles", "Identity", "identity", "release"]


class _Opened:
    """One folder's sample table and reader, shared by every dataset on it in a process.

    Shared because py-lmdb refuses to open an environment twice in one process.
    """

    def __init__(self, path: Path, remote: RemoteSource | None = None) -> None:
        self.pid = os.getpid()
        index, self.table = open_dataset(path)
        module = formats.load(index.format)
        self.reader: RecordReader = (
            module.open_reader(path, index, self.table) if remote is None
            # a URL's mirror: shards are fetched on demand (readers.remote)
            else remote_reader(lambda: module.open_reader(path, index, self.table), remote, index)
        )


# A folder and the version of its index.json (rewritten by rename when reconverted),
# so a dataset reconverted in place is not served by the reader of the old one.
Identity = tuple[Path, int, int]
_OPENED: weakref.WeakValueDictionary[Identity, _Opened] = weakref.WeakValueDictionary()


def identity(path: Path) -> Identity:
    info = (path / INDEX_NAME).stat()
    return path, info.st_ino, info.st_mtime_ns


def opened(key: Identity, remote: RemoteSource | None = None) -> _Opened:
    """This process's reader of the folder, opened on first use."""
    entry = _OPENED.get(key)
    if entry is None or entry.pid != os.getpid():
        entry = _OPENED[key] = _Opened(key[0], remote)
    return entry


def _close_inherited() -> None:
    """In a forked child, close the readers inherited from the parent, right away.

    LMDB forbids using an environment after fork, and py-lmdb counts an inherited one
    as open, refusing to open the same files again in the child (by us or by anyone)
    until it is closed. Closing only unmaps and closes the child's copies; the parent's
    handles are untouched. Datasets notice the missing entry and reopen on next read.
    """
    for key, entry in list(_OPENED.items()):
        if entry.pid != os.getpid():
            _OPENED.pop(key, None)
            entry.reader.close()


os.register_at_fork(after_in_child=_close_inherited)


class Handles:
    """What one dataset reads through in one process: the shared reader plus its own cache."""

    def __init__(self, key: Identity, chunk_size: int, cache_bytes: int,
                 remote: RemoteSource | None = None) -> None:
        self.opened = opened(key, remote)
        self.table = self.opened.table
        self.reader = self.opened.reader
        if getattr(self.reader, "memory_mapped", False):
            cache_bytes = 0  # the page cache already holds it (readers.cache)
        self.cached = CachedReader(self.reader, len(self.table), chunk_size, cache_bytes)
        # npy rows: a batch in one gather (readers.batching.collate)
        self.gather = cast(Gatherer, self.reader) if hasattr(self.reader, "gather") else None

    def current(self, key: Identity) -> bool:
        """Whether these handles are still this process's for `key` (not after a fork, not
        after `release`)."""
        return self.opened is _OPENED.get(key) and self.opened.pid == os.getpid()


def release(key: Identity) -> None:
    """Close this process's reader of a folder, for every dataset on it (they reopen)."""
    entry = _OPENED.pop(key, None)
    if entry is not None and entry.pid == os.getpid():
        entry.reader.close()
