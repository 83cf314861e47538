"""Read the members of an archive in place, by offset: the `origin` of archive items.

    Entry         one member as the scan sees it (transient, never kept)
    Columns       the same facts per member while the scan lists them (compact arrays)
    MemberTable   per item (sorted scan order): where its bytes start, how many, and for
                  zip members the compression method and CRC-32 (numpy arrays: no
                  Python object per member)
    ArchiveSource reads item i's bytes with os.pread on one descriptor per process
                  (pread takes no shared file position, so threads need no lock)

A tar member's data lies uncompressed at its offset, also inside a tar nested in a
tar (offsets are absolute in the outer file); in a .tar.gz the offsets are into the
uncompressed stream, read forward by a `GzipCursor`. A zip member's offset is its local
header, whose name and extra lengths are read at read time (the central directory
does not repeat them), then the data is inflated and its CRC-32 checked, so a damaged
member is a reject, not silently different bytes.

Handles open lazily where they read and never travel through pickle (invariant 4);
a pickled source carries its path, its member table and the archive's fingerprint.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core.record import Reject, SourceItem
from packer.errors import RejectReason, SourceError
from packer.source.gzcursor import GzipCursor

STORED, DEFLATED = 0, 8  # zip compression methods read here (tar members are STORED)
LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... name length, extra length
LOCAL_SIGNATURE = b"PK\x03\x04"


@dataclass(frozen=True, slots=True)
class Entry:
    """One member as the scan sees it (transient: not kept)."""

    name: str  # cleaned, `/`-separated, relative
    kind: str  # "file", "dir", or a reason the member cannot be packed
    offset: int = 0
    size: int = 0
    method: int = STORED
    crc: int = 0
    # A small member's bytes when the listing read them anyway (they lay in the window of
    # its header: a label or caption member), else b""
    head: bytes = b""


@dataclass(frozen=True)
class MemberTable:
    """Offsets, sizes, methods and CRCs of the items, indexed by item position."""

    offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    methods: npt.NDArray[np.uint8]
    crcs: npt.NDArray[np.uint32]


class Columns:
    """Offsets, sizes, methods and CRCs of members as they are listed (compact arrays)."""

    def __init__(self) -> None:
        self.offsets, self.sizes = array("q"), array("q")
        self.methods, self.crcs = array("B"), array("L")

    def append(self, entry: Entry) -> None:
        self.offsets.append(entry.offset)
        self.sizes.append(entry.size)
        self.methods.append(entry.method)
        self.crcs.append(entry.crc)

    def table(self, rows: npt.NDArray[np.intp]) -> MemberTable:
        """The member table of these rows, in this order (the items' order)."""
        return MemberTable(np.asarray(self.offsets, np.int64)[rows],
                           np.asarray(self.sizes, np.int64)[rows],
                           np.asarray(self.methods, np.uint8)[rows],
                           np.asarray(self.crcs, np.uint32)[rows])  # "L" may be 8 bytes


@dataclass(frozen=True)
class ArchiveStat:
    """What must not change while an archive is read: its size and mtime."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> ArchiveStat:
        info = os.stat(path)
        return cls(info.st_size, info.st_mtime_ns)


def not_utf8(prefix: str, name: str) -> Reject:
    """The reject of a member whose name holds bytes that are not UTF-8."""
    printable = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return Reject(-1, prefix + printable, "member name is not valid UTF-8; rename it")


def stat_archive(path: Path) -> ArchiveStat:
    """The archive's size and mtime, which must not change while it is read."""
    try:
        return ArchiveStat.of(path)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the archive ({exc.strerror or exc})") from exc


def member_reader(path: Path, kind: str, before: ArchiveStat, table: MemberTable,
                  noun: str, parts: Iterable[bytes] = ()) -> ArchiveSource:
    """The reader of these members, once the archive is known unchanged since `before`;
    its fingerprint (for resume) is a hash of the size, mtime, `parts` and the table."""
    if stat_archive(path) != before:
        raise SourceError(f"{path}: the {noun} changed while it was scanned; convert again")
    digest = hashlib.sha256(f"{before.size}:{before.mtime_ns}\n".encode())
    for part in parts:
        digest.update(part)
    for column in (table.offsets, table.sizes, table.methods, table.crcs):
        digest.update(np.ascontiguousarray(column).tobytes())
    return ArchiveSource(path, kind, table, digest.hexdigest(), before)


def read_entries(path: Path, kind: str, stat: ArchiveStat, entries: Sequence[Entry]
                 ) -> list[bytes | RejectReason]:
    """The bytes of these members (a damaged one: its reason), read in archive order;
    those the listing read already (`Entry.head`) are not read again."""
    columns = Columns()
    for entry in entries:
        columns.append(entry)
    reader = ArchiveSource(path, kind, columns.table(np.arange(len(entries))), "", stat)
    found: list[bytes | RejectReason] = [entry.head for entry in entries]
    try:
        for i in np.argsort(reader.table.offsets, kind="stable").tolist():
            if not entries[i].head:
                try:
                    found[i] = reader.read_member(i)
                except RejectReason as exc:
                    found[i] = exc
    finally:
        reader.close()
    return found


class ArchiveSource:
    """Reads the bytes of archive members for encoding (see the module docstring).

    `whole_files`: items are files (members), encoded exactly as the extracted file
    would be (its extension, the zero-byte check), so that converting an archive gives
    the same dataset as converting the folder it extracts to.
    """

    whole_files = True
    pixel_size: tuple[int, int] | None = None

    def __init__(self, path: Path, kind: str, table: MemberTable, fingerprint: str,
                 stat: ArchiveStat) -> None:
        self.path = path
        self.kind = kind  # "tar", "zip" or "tgz" (read forward: `GzipCursor`)
        self.table = table
        self.fingerprint = fingerprint  # size, mtime and member table (in the job identity)
        self.stat = stat
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = -1
        self._gzip: GzipCursor | None = None

    def open(self) -> None:
        """Refuse an archive that changed since the scan (its offsets would be wrong)."""
        if stat_archive(self.path) != self.stat:
            raise SourceError(f"{self.path}: the archive changed since it was scanned; "
                              "convert again")
        if self.kind != "tgz":
            self._descriptor()

    def read(self, item: SourceItem) -> bytes:
        """The bytes of member `item.position`; damage raises RejectReason."""
        return self.read_member(item.position)

    def read_member(self, i: int) -> bytes:
        """The bytes of member `i` of the table; damage raises RejectReason."""
        offset, size = int(self.table.offsets[i]), int(self.table.sizes[i])
        try:
            if self.kind == "tgz":
                return self._cursor().read(i)
            fd = self._descriptor()
            if self.kind == "zip":
                return self._read_zip(fd, i, offset, size)
            return _exactly(fd, size, offset)
        except OSError as exc:
            raise RejectReason(f"unreadable in the archive: {exc.strerror or exc}") from exc

    def _read_zip(self, fd: int, i: int, offset: int, size: int) -> bytes:
        header = _exactly(fd, LOCAL_HEADER.size, offset)
        signature, name_len, extra_len = LOCAL_HEADER.unpack(header)
        if signature != LOCAL_SIGNATURE:
            raise RejectReason("corrupt in the archive: no local header at its offset")
        data = _exactly(fd, size, offset + LOCAL_HEADER.size + name_len + extra_len)
        if int(self.table.methods[i]) == DEFLATED:
            try:
                data = zlib.decompress(data, -15)
            except zlib.error as exc:
                raise RejectReason(f"corrupt in the archive: {exc}") from exc
        if zlib.crc32(data) != int(self.table.crcs[i]):
            raise RejectReason("corrupt in the archive: CRC-32 mismatch")
        return data

    def _descriptor(self) -> int:
        """This process's descriptor (a forked child opens its own)."""
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                self._pid = os.getpid()
            return self._fd

    def _cursor(self) -> GzipCursor:
        """This process's forward reader of a .tar.gz (`GzipCursor`)."""
        with self._lock:
            if self._gzip is None or self._pid != os.getpid():
                self._gzip = GzipCursor(self.path, self.table.offsets, self.table.sizes)
                self._pid = os.getpid()
            return self._gzip

    def close(self) -> None:
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            if self._gzip is not None and self._pid == os.getpid():
                self._gzip.close()
            self._fd = self._gzip = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "table": self.table,
                "fingerprint": self.fingerprint, "stat": self.stat}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]


def _exactly(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes at `offset`; fewer (the archive shrank) is a truncated member."""
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise RejectReason(f"truncated in the archive: {len(data)} of {size} bytes")
    return data
