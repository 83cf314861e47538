"""Whole-file hashing for shard checksums."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 8 << 20


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in large blocks (hashlib releases the GIL)."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()
