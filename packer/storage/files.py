"""Whole input files read for a conversion, with problems worded for rejects.jsonl."""

from __future__ import annotations

import os

from packer.errors import RejectReason

__all__ = ["read_input"]


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
