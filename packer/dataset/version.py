"""Which version of a dataset a process holds: one definition for every cache and copy.

A local dataset's version is its index.json's file identity (device, inode, mtime): a
conversion writes index.json last, atomically, so a reconverted dataset has a new one. A
URL's version is its index.json's content, as fetched. The process-wide handle cache
(packer.dataset.open), the in-RAM copies (readers.ram) and the remote mirror
(readers.remote) all key on these, so a dataset reconverted in place is never served
from a stale copy.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from packer.core.layout import INDEX_NAME

__all__ = ["LocalVersion", "local_version", "url_version_name"]


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
