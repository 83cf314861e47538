"""The files a conversion reads and writes: whole inputs read for rejects.jsonl, crash-safe
writes, and sha256 checksums of files, byte ranges and pieces.

A crash-safe write goes to a temporary name, is fsynced, renamed into place and its
folder fsynced: a reader or a resumed conversion then sees either the old state or the
complete new file, never a half-written one, whatever kills the process.

A file's checksum may be the sha256 of consecutive byte ranges (*pieces*), so that a
file that grows at the end keeps the digests of its old ranges. npy's images.npy has a
128-byte header that names the sample count, then the rows; its pieces are the header,
the rows of the conversion, and the rows of each append. An append then hashes its
header and its own rows, not the whole file again, and the file's checksum stays one
string: the sha256 of the pieces' list (`pieces_digest`), which `file_problem` checks
piece by piece, naming the byte range that differs.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from packer.errors import RejectReason

PARTIAL_SUFFIX = ".partial"
WINDOW = 16 << 20  # bytes mapped and hashed at a time
Piece = tuple[int, str]  # (bytes, their sha256 in hex)


def read_input(path: str) -> bytes:
    """The whole file in four system calls (open, fstat, read, close), no file object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return _read_all(fd)
        finally:
            os.close(fd)
    except FileNotFoundError as exc:
        raise RejectReason("missing file: it does not exist") from exc
    except IsADirectoryError as exc:
        raise RejectReason("unreadable: it is a folder") from exc
    except OSError as exc:
        raise RejectReason(f"unreadable: {exc.strerror or exc}") from exc


def _read_all(fd: int) -> bytes:
    """Read to the end; one read() for a file whose size fstat reports correctly."""
    size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if len(data) == size:  # all that fstat promised, and nothing beyond: the end
        return data
    chunks = [data]  # the file changed size, or a short read (some network file systems)
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


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
