"""Members of a gzip-compressed tar, read in one forward pass (gzip cannot seek back).

The scan requires such a tar's members in name order (its item order), so that the
conversion, which asks for items in order, reads the stream front to back once.
Threads ask slightly out of order (a few batches are in flight): members passed on
the way to the one asked for are decompressed into a buffer when they lie within
AHEAD bytes of it, so memory stays bounded whatever the archive's size; a member
asked for after the stream passed it without keeping it restarts the stream from
the beginning (correct, slow, and not what a conversion does). One lock: a gzip
stream decompresses on one thread anyway.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packer.errors import RejectReason

AHEAD = 64 << 20  # bytes of members kept for threads that asked for a later member


class GzipCursor:
    """Reads member i (at uncompressed `offsets[i]`, `sizes[i]` bytes) of a .tar.gz."""

    def __init__(self, path: Path, offsets: npt.NDArray[np.int64],
                 sizes: npt.NDArray[np.int64]) -> None:
        self.path = path
        self.offsets = offsets
        self.sizes = sizes
        self.lock = threading.Lock()
        self.stream: gzip.GzipFile | None = None
        self.position = 0  # uncompressed bytes consumed
        self.next = 0  # the first member not yet passed
        self.ahead: dict[int, bytes] = {}

    def read(self, i: int) -> bytes:
        with self.lock:
            data = self.ahead.pop(i, None)
            if data is not None:
                return data
            target = int(self.offsets[i])
            if self.stream is None or target < self.position:
                self._restart()
            keep_from = int(np.searchsorted(self.offsets, target - AHEAD))
            for j in range(max(self.next, keep_from), i):
                self.ahead[j] = self._take(j)
            self.next = i + 1
            return self._take(i)

    def _take(self, i: int) -> bytes:
        assert self.stream is not None  # _restart opened it
        offset, size = int(self.offsets[i]), int(self.sizes[i])
        try:
            self.stream.seek(offset)  # forward: decompresses and discards
            data = self.stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise RejectReason(f"unreadable in the archive: {exc}") from exc
        if len(data) != size:
            raise RejectReason(f"truncated in the archive: {len(data)} of {size} bytes")
        self.position = offset + size
        return data

    def _restart(self) -> None:
        self.close()
        self.stream = gzip.open(self.path, "rb")
        self.position = self.next = 0
        self.ahead.clear()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
