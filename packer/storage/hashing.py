"""Hashing: whole files for shard checksums (one sha256 for writers, verify and downloads),
and the per-sample digest (xxh3-128) the index stores."""

from __future__ import annotations

import hashlib
import mmap
import os
from pathlib import Path

import xxhash


def sha256_file(path: Path, window: int = 16 << 20) -> str:
    """sha256 of a whole file (the shard checksums), hashed from a memory map one window at a
    time.

    No read copies (hashlib reads the mapped pages and releases the GIL), and only one
    window is mapped at once, so the resident set stays small however large the file.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        for start in range(0, size, window):
            length = min(window, size - start)
            with mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ,
                           offset=start) as mapped:
                digest.update(mapped)
    return digest.hexdigest()


def digest_of(data: bytes | memoryview) -> bytes:
    """The per-sample content hash stored in the index (xxh3-128: ~10 GB/s)."""
    return xxhash.xxh3_128_digest(data)
