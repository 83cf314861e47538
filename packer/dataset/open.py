"""One per-process registry of opened packed datasets, shared by every reader of a folder:
the datasets of `readers` and a conversion that reads a packed dataset (`PackedSource`).

Why one: py-lmdb refuses to open an environment twice in a process, so a DataLoader
worker that reads a dataset and also converts from it must use one reader, not two.

An entry is keyed by the dataset's version: for a local folder, its index.json's file
identity (device, inode, mtime: a conversion writes index.json last, by rename, so a
reconverted dataset has a new one); for a URL, its index.json's content as fetched. The
in-RAM copies and the remote mirror of `readers` key on the same versions, so a dataset
reconverted in place is never served from a stale reader or copy.
Entries live while someone holds them (a weak registry), the last few that a conversion
source asked for longer (`keep=True`: a worker process unpickles a source with every batch
it is sent).

A forked child closes the readers it inherited at once (LMDB forbids using an
environment after fork, and py-lmdb counts an inherited one as open, refusing to open the
same files again in the child until it is closed); holders notice (`is_current`) and
open their own on next use.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packer import formats
from packer.core.index import INDEX_NAME, Index, open_dataset
from packer.formats.base import RecordReader

__all__ = ["LocalVersion", "Opened", "Wrap", "is_current", "is_url", "local_version", "opened",
           "release", "url_version_name"]

# Builds the shared reader from the format's opener (the readers' remote mirror of a URL).
Wrap = Callable[[Callable[[], RecordReader], Index], RecordReader]
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
KEPT = 4  # entries a conversion source keeps open after its last holder is gone


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a URL (`s3://...`, `file://...`) rather than a local path."""
    return isinstance(path, str) and URL.match(path) is not None


@dataclass(frozen=True)
class LocalVersion:
    """A local dataset folder and the file identity of its index.json."""

    folder: Path
    device: int
    inode: int
    mtime_ns: int

    def name(self) -> str:
        """A folder-safe name of this version (32 hex digits)."""
        text = "\0".join(map(str, (self.folder, self.device, self.inode, self.mtime_ns)))
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def local_version(folder: Path) -> LocalVersion:
    """The version of the dataset in `folder` now (FileNotFoundError without index.json)."""
    info = (folder / INDEX_NAME).stat()
    return LocalVersion(folder, info.st_dev, info.st_ino, info.st_mtime_ns)


def url_version_name(url: str, index_json: bytes) -> str:
    """A folder-safe name of the dataset at `url` whose index.json holds `index_json`:
    the URL's digest, then the index's (16 hex digits each)."""
    where = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return f"{where}-{hashlib.sha256(index_json).hexdigest()[:16]}"


class Opened:
    """One folder's index, sample table and readers in one process."""

    def __init__(self, key: LocalVersion, wrap: Wrap | None) -> None:
        self.key = key
        self.folder = key.folder
        self.pid = os.getpid()
        self.index, self.table = open_dataset(self.folder)
        # what a converted dataset records as its source (`PackedSource.lineage`)
        self.sha256 = hashlib.sha256((self.folder / INDEX_NAME).read_bytes()).hexdigest()
        self._wrap = wrap
        self._lock = threading.Lock()
        self._local = threading.local()
        self._shared: RecordReader | None = None

    def shared(self) -> RecordReader:
        """The one reader every holder in the process shares, opened on first use."""
        with self._lock:
            if self._shared is None:
                wrap = self._wrap
                self._shared = self._open() if wrap is None else wrap(self._open, self.index)
            return self._shared

    def reader(self) -> RecordReader:
        """A reader this thread may use: the shared one where the format allows every
        thread to share it (`THREAD_SAFE_READER`), else this thread's."""
        if formats.load(self.index.format).THREAD_SAFE_READER:
            return self.shared()
        reader: RecordReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = self._open()
        return reader

    def _open(self) -> RecordReader:
        return formats.load(self.index.format).open_reader(self.folder, self.index, self.table)

    def close(self) -> None:
        """Close the shared reader and this thread's (other threads' go with their thread)."""
        with self._lock:
            readers = [self._shared, getattr(self._local, "reader", None)]
            self._shared = self._local.reader = None
        for reader in readers:
            if reader is not None:
                reader.close()


_OPENED: weakref.WeakValueDictionary[LocalVersion, Opened] = weakref.WeakValueDictionary()
_KEPT: OrderedDict[LocalVersion, Opened] = OrderedDict()
_LOCK = threading.Lock()


def opened(key: LocalVersion, wrap: Wrap | None = None, *, keep: bool = False) -> Opened:
    """This process's entry for the folder, opened on first use.

    `wrap`: how the shared reader is built, where this call opens the entry.
    `keep`: hold it among the last KEPT asked for, after every holder is gone.
    """
    with _LOCK:
        entry = _OPENED.get(key)
        if entry is None or entry.pid != os.getpid():
            entry = _OPENED[key] = Opened(key, wrap)
        if keep:
            _KEPT[key] = entry
            _KEPT.move_to_end(key)
            while len(_KEPT) > KEPT:  # forgotten, not closed: a holder may still use it
                _KEPT.popitem(last=False)
        return entry


def is_current(entry: Opened) -> bool:
    """Whether `entry` is still this process's (not after a fork, nor after `release`)."""
    return entry is _OPENED.get(entry.key) and entry.pid == os.getpid()


def release(key: LocalVersion) -> None:
    """Close this process's readers of a folder, for every holder (they reopen)."""
    with _LOCK:
        entry = _OPENED.pop(key, None)
        _KEPT.pop(key, None)
    if entry is not None and entry.pid == os.getpid():
        entry.close()


def _close_inherited() -> None:
    """In a forked child: close the entries of the parent, right away (module docstring).

    Closing only unmaps and closes the child's copies; the parent's handles are untouched.
    """
    global _LOCK
    _LOCK = threading.Lock()  # another thread of the parent may have held it at the fork
    inherited = [entry for entry in list(_OPENED.values()) if entry.pid != os.getpid()]
    for entry in inherited:
        _OPENED.pop(entry.key, None)
        _KEPT.pop(entry.key, None)
        entry._lock = threading.Lock()
        entry.close()


os.register_at_fork(after_in_child=_close_inherited)
