"""sha256 of whole files and byte ranges: the shard checksums of writers, verify and
downloads."""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path

WINDOW = 16 << 20  # bytes mapped and hashed at a time


def sha256_file(path: Path, window: int = WINDOW) -> str:
    """sha256 of a whole file (the shard checksums): `sha256_range` over all of it."""
    return sha256_range(path, 0, os.stat(path).st_size, window)


def sha256_range(path: Path, start: int, size: int, window: int = WINDOW) -> str:
    """sha256 of `size` bytes of `path` from `start`, hashed from a memory map one window
    at a time.

    No read copies (hashlib reads the mapped pages and releases the GIL), and only one
    window is mapped at once, so the resident set stays small however large the file.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size < start + size:
            raise OSError(f"{path}: shorter than {start + size} bytes; restore it or "
                          "reconvert")
        at, end = start, start + size
        while at < end:
            base = at - at % mmap.ALLOCATIONGRANULARITY  # a map starts on a page
            length = min(window, end - base)
            with mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ,
                           offset=base) as mapped:
                digest.update(memoryview(mapped)[at - base :])
            at = base + length
    return digest.hexdigest()

