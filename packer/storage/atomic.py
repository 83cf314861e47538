"""Crash-safe file writes: a temporary name, fsync, rename, fsync of the folder.

A reader or a resumed conversion then sees either the old state or the complete new
file, never a half-written one, whatever kills the process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

PARTIAL_SUFFIX = ".partial"


def fsync_path(path: Path) -> None:
    """fsync by path: a folder, to make a rename inside it durable, or a file written
    by another library (h5py, lmdb, a memmap)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path
fsync_file = fsync_path


def partial_path(path: Path) -> Path:
    """The temporary name a file is written under before it is renamed into place."""
    return path.with_name(path.name + PARTIAL_SUFFIX)


def commit(tmp: Path, path: Path) -> None:
    """Rename a fully written and fsynced temporary file into place."""
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """Open `path` for writing so that it appears only once complete."""
    tmp = partial_path(path)
    with open(tmp, "wb") as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())
    commit(tmp, path)


def write_atomic(path: Path, data: bytes) -> None:
    """Write a whole file atomically."""
    with atomic_writer(path) as handle:
        handle.write(data)
