"""A file's checksum as the sha256 of consecutive byte ranges (*pieces*), so that a file
that grows at the end keeps the digests of its old ranges.

npy's images.npy has a 128-byte header that names the sample count, then the rows. Its
pieces are the header, the rows of the conversion, and the rows of each append. An
append then hashes its header and its own rows, not the whole file again, and the
file's checksum stays one string: the sha256 of the pieces' list
(`pieces_digest`), which `file_problem` checks piece by piece, naming the byte range
that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from packer.storage.hashing import sha256_file, sha256_range

Piece = tuple[int, str]  # (bytes, their sha256 in hex)


def pieces_digest(pieces: Sequence[Piece]) -> str:
    """The file's checksum: sha256 of one `<bytes> <sha256>` line per piece."""
    lines = "".join(f"{size} {digest}\n" for size, digest in pieces)
    return hashlib.sha256(lines.encode("ascii")).hexdigest()


def file_problem(path: Path, sha256: str, pieces: Sequence[Piece] = ()) -> str | None:
    """None when `path` has the checksum `sha256` (of its `pieces` when given), else what
    differs: the whole file, or the first piece's byte range."""
    if not pieces:
        return None if sha256_file(path) == sha256 else "sha256 differs from the index"
    if pieces_digest(pieces) != sha256:
        return "its pieces do not add up to the index's sha256 (index.json is damaged)"
    start = 0
    for size, digest in pieces:
        if sha256_range(path, start, size) != digest:
            return f"bytes {start}-{start + size - 1} differ from the index"
        start += size
    return None
