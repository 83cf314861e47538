"""Members of a gzip-compressed tar, read in one forward pass (gzip cannot seek back).

The conversion asks for items in name order (their item order, give or take the
batches threads have in flight); the stream holds them in archive order, which is name
order for a tar made by Python's tarfile or `tar --sort=name`, and directory order
(any order) for a plain `tar czf`. The stream is read forward once either way: a
member passed on the way to the one asked for, and not yet asked for itself, is kept
until it is, in memory up to MEMORY bytes and beyond that in an anonymous temporary
file (TMPDIR; gone when the cursor closes, emptied whenever all it holds was handed
out), so memory stays bounded whatever the archive's size and order. The file holds
what lies between a member's place in the stream and its turn: a folder's worth for
directory order, and at worst (an archive in reverse order) the uncompressed members,
what `gunzip -k` would write. Members more than SLACK items before the lowest one
asked for are passed without keeping them (a resumed conversion starts midway and
never asks for them), and once an item SLACK past the lowest has been handed out, those
below the lowest are dropped and no more are kept (the run has settled past them); one
asked for after the stream passed it without keeping it
restarts the stream from the beginning (correct, slow, and not what a conversion
does). One lock: a gzip stream decompresses on one thread anyway.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import threading
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from packer.errors import RejectReason

MEMORY = 64 << 20  # bytes of members kept in memory before they go to the spill file
MAX_KEPT = 1 << 16  # members kept in memory (tiny members: no object per member)
SLACK = 4096  # items before the lowest asked for that threads may still ask for


class GzipCursor:
    """Reads member i (at uncompressed `offsets[i]`, `sizes[i]` bytes) of a .tar.gz."""

    def __init__(self, path: Path, offsets: npt.NDArray[np.int64],
                 sizes: npt.NDArray[np.int64]) -> None:
        self.path = path
        self.offsets = offsets
        self.sizes = sizes
        self.by_offset = np.argsort(offsets, kind="stable")  # archive order
        self.lock = threading.Lock()
        self.stream: gzip.GzipFile | None = None
        self.passed = 0  # members of by_offset the stream has gone by
        self.served = np.zeros(len(offsets), np.bool_)
        self.lowest = len(offsets)  # the lowest item asked for: the run's start
        self.kept: dict[int, bytes] = {}
        self.kept_bytes = 0
        self.spill: BinaryIO | None = None
        self.spilled = np.zeros(0, np.int64)  # item -> its offset in the spill file, or -1
        self.waiting = 0  # members in the spill file not yet handed out
        self.settled = False  # an item SLACK past `lowest` was handed out: see _settle

    def read(self, i: int) -> bytes:
        with self.lock:
            self.lowest = min(self.lowest, i)
            data = self._kept(i)
            if data is None:
                if self.stream is None or self._behind(i):
                    self._restart()
                data = self._advance_to(i)
            self.served[i] = True
            if not self.settled and i >= self.lowest + SLACK:
                self._settle()
            return data

    def _settle(self) -> None:
        """Drop what lies below the lowest item asked for: threads ask at most SLACK items
        out of order, so once one SLACK past it was served, nothing below will be (a
        resumed run kept those in case; without this they would fill memory and the
        spill file, which could then never empty)."""
        self.settled = True
        for j in [j for j in self.kept if j < self.lowest]:
            self.kept_bytes -= len(self.kept.pop(j))
        if self.spill is not None:
            below = self.spilled[: self.lowest] >= 0
            self.waiting -= int(below.sum())
            self.spilled[: self.lowest][below] = -1
            if not self.waiting:
                self.spill.truncate(0)

    def _behind(self, i: int) -> bool:
        """Whether the stream went past member i (without keeping it)."""
        if self.passed == 0:
            return False
        last = int(self.by_offset[self.passed - 1])
        return int(self.offsets[i]) < int(self.offsets[last] + self.sizes[last])

    def _advance_to(self, i: int) -> bytes:
        """Read forward to member i, keeping the members passed that are still wanted."""
        floor = self.lowest if self.settled else self.lowest - SLACK
        while self.passed < len(self.by_offset):
            j = int(self.by_offset[self.passed])
            if j == i:
                data = self._take(j)
                self.passed += 1
                return data
            if j >= floor and not self.served[j]:
                self._keep(j, self._take(j))
            self.passed += 1
        raise RejectReason("unreadable in the archive: the stream ended before the member")

    def _keep(self, j: int, data: bytes) -> None:
        if self.kept_bytes + len(data) <= MEMORY and len(self.kept) < MAX_KEPT:
            self.kept[j] = data
            self.kept_bytes += len(data)
            return
        if self.spill is None:
            self.spill = tempfile.TemporaryFile(prefix="pack-tgz-")
            self.spilled = np.full(len(self.offsets), -1, np.int64)
        self.spill.seek(0, os.SEEK_END)
        self.spilled[j] = self.spill.tell()
        self.spill.write(data)
        self.waiting += 1

    def _kept(self, i: int) -> bytes | None:
        data = self.kept.pop(i, None)
        if data is not None:
            self.kept_bytes -= len(data)
            return data
        if self.spill is None or self.spilled[i] < 0:
            return None
        at, self.spilled[i] = int(self.spilled[i]), -1
        self.spill.flush()
        data = os.pread(self.spill.fileno(), int(self.sizes[i]), at)
        self.waiting -= 1
        if not self.waiting:  # every member in it handed out: the file starts over
            self.spill.truncate(0)
        return data

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
        return data

    def _restart(self) -> None:
        self.close()
        self.stream = gzip.open(self.path, "rb")
        self.passed = 0

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.spill is not None:
            self.spill.close()
            self.spill = None
            self.waiting = 0
        self.kept.clear()
        self.kept_bytes = 0
