"""Read the image cells of Parquet files (and `datasets` Arrow files) in place: the
`origin` of Parquet items (`scan_parquet` scans them).

    TableFile      one file: its kind, size and mtime, where each row group starts
                   (a Parquet row group, or a record batch of an Arrow IPC file)
    RowTable       per item (sorted scan order): its file and its row in that file
    ParquetSource  reads item i's image cell from its row group; the image cells of a
                   row group are kept in a cache shared by the threads, so a batch of
                   neighbouring rows costs one row-group read, not one a row

A row group is the smallest unit Parquet reads, so it is read whole (only the image
column, only its `bytes` child for `{bytes, path}` structs) and kept while it is in use:
a thread asking for a group another thread is reading waits for it, each thread keeps
its last group at hand, and the least recently used groups go past MAX_GROUPS or
MAX_BYTES. Each thread reads through its own file handle; handles open lazily where
they read and never travel through pickle (invariant 4): a pickled source carries its
paths, row table and fingerprint.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from packer.core.record import SourceItem
from packer.errors import MissingDependencyError, RejectReason, SourceError, install_line
from packer.source.items import Strings
from packer.source.members import ArchiveStat

MAX_GROUPS = 64  # decoded row groups kept at most
MAX_BYTES = 1 << 30  # and their image bytes at most (the group in use is always kept)
ARROW_FILE_MAGIC = b"ARROW1"  # an Arrow IPC file (random access); else a stream


def load_pyarrow(where: str) -> ModuleType:
    """pyarrow with its parquet and ipc modules imported; an install hint when missing."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise MissingDependencyError(f"{where}: reading Parquet needs pyarrow; run "
                                     f"`{install_line('parquet')}`") from exc
    return cast(ModuleType, pyarrow)


@dataclass(frozen=True)
class ImageColumn:
    """The column that holds the images: binary, or `{bytes, path}` structs (`nested`)."""

    name: str
    nested: bool

    @property
    def path(self) -> str:
        """The column path Parquet reads: only the bytes of a struct."""
        return f"{self.name}.bytes" if self.nested else self.name


@dataclass(frozen=True)
class TableFile:
    """One file of the source: "parquet", or "arrow" (IPC, `save_to_disk`)."""

    path: str
    kind: str
    stat: ArchiveStat
    starts: npt.NDArray[np.int64]  # first row of each row group, then the row count


@dataclass(frozen=True)
class RowTable:
    """Per item, in item order: the index of its file and its row in that file."""

    files: npt.NDArray[np.int32]
    rows: npt.NDArray[np.int64]


def open_table(file: TableFile) -> Any:
    """A reader of `file`: a pyarrow ParquetFile, or the record batches of an Arrow file
    (memory-mapped: no copy)."""
    pa = load_pyarrow(file.path)
    if file.kind == "parquet":
        return pa.parquet.ParquetFile(file.path, page_checksum_verification=True)
    source = pa.memory_map(file.path)
    if source.read(len(ARROW_FILE_MAGIC)) == ARROW_FILE_MAGIC:
        source.seek(0)
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]
    source.seek(0)
    return list(pa.ipc.open_stream(source))


def read_group(handle: Any, kind: str, group: int, column: ImageColumn) -> list[Any]:
    """The image cells of one row group: bytes, or None for a null cell."""
    if kind == "parquet":
        array = handle.read_row_group(group, columns=[column.path],
                                      use_threads=False).column(0).combine_chunks()
    else:
        array = handle[group].column(column.name)
    return list((array.field("bytes") if column.nested else array).to_pylist())


class _Slot:
    """A row group being read or read: its image cells, or why it could not be read."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.cells: list[Any] | None = None
        self.error: str | None = None
        self.nbytes = 0


class ParquetSource:
    """Reads the image cells of the items (see the module docstring).

    `whole_files` False: the bytes are an encoded image with no file name, so its
    extension comes from the bytes when it is encoded, as a packed sample's does.
    """

    whole_files = False
    pixel_size: tuple[int, int] | None = None

    def __init__(self, files: tuple[TableFile, ...], column: ImageColumn, rows: RowTable,
                 fingerprint: str, fields: Strings | None = None) -> None:
        self.files = files
        self.column = column
        self.rows = rows
        self.fingerprint = fingerprint  # sizes, mtimes, schema and rows (in the job identity)
        self.fields = fields  # each item's fields record, for appends (read_fields)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._slots: OrderedDict[tuple[int, int], _Slot] = OrderedDict()
        self._handles: dict[int, tuple[int, Any]] = {}  # thread -> (file, its reader)
        self._starts = [file.starts.tolist() for file in files]  # bisect: no numpy per item
        self._last = threading.local()  # this thread's last group: (pid, key, slot)

    def open(self) -> None:
        """Refuse files that changed since the scan (their rows could be others)."""
        for file in self.files:
            try:
                now = ArchiveStat.of(Path(file.path))
            except OSError as exc:
                raise SourceError(f"{file.path}: cannot read the file "
                                  f"({exc.strerror or exc})") from exc
            if now != file.stat:
                raise SourceError(f"{file.path}: the file changed since it was scanned; "
                                  "convert again")

    def read(self, item: SourceItem) -> bytes:
        """The image bytes of item `item.position`; a null or empty cell, or a row group
        that cannot be read, raises RejectReason."""
        i = item.position
        number, row = int(self.rows.files[i]), int(self.rows.rows[i])
        starts = self._starts[number]
        group = bisect.bisect_right(starts, row) - 1
        value = self._group(number, group)[row - starts[group]]
        if value is None:
            raise RejectReason("no image: the image cell is null")
        if not value:
            raise RejectReason("zero bytes: the image cell is empty")
        return bytes(value)

    def read_fields(self, item: SourceItem) -> bytes:
        """The item's fields record (an append reads them by scan position)."""
        return b"" if self.fields is None else self.fields.raw(item.position)

    def _group(self, number: int, group: int) -> list[Any]:
        """The image cells of a row group: this thread's last, from the cache, or read
        here once."""
        key = (number, group)
        last = getattr(self._last, "group", None)
        if last is not None and last[1] == key and last[0] == os.getpid():
            return last[2]  # type: ignore[no-any-return]
        with self._lock:
            self._forget_parent()
            slot = self._slots.get(key)
            owner = slot is None
            if slot is None:
                slot = self._slots[key] = _Slot()
            else:
                self._slots.move_to_end(key)
        if owner:
            self._fill(slot, number, group)
        slot.ready.wait()
        if slot.error is not None or slot.cells is None:
            raise RejectReason(slot.error or "the row group could not be read")
        self._last.group = (os.getpid(), key, slot.cells)
        return slot.cells

    def _fill(self, slot: _Slot, number: int, group: int) -> None:
        file = self.files[number]
        try:
            slot.cells = read_group(self._handle(number), file.kind, group, self.column)
            slot.nbytes = sum(len(cell) for cell in slot.cells if cell is not None)
        except MissingDependencyError as exc:
            slot.error = str(exc)
        except Exception as exc:  # a damaged page can make pyarrow raise anything
            slot.error = f"unreadable row group {group} of {file.path}: {one_line(exc)}"
        finally:
            if slot.cells is None and slot.error is None:  # interrupted: not kept
                slot.error = f"the read of row group {group} of {file.path} was interrupted"
                with self._lock:
                    self._slots.pop((number, group), None)
            slot.ready.set()
        with self._lock:
            self._trim()

    def _trim(self) -> None:
        """Drop the least recently used groups that are read, past the limits."""
        total = sum(slot.nbytes for slot in self._slots.values())
        for key in list(self._slots):
            if len(self._slots) <= 1 or (len(self._slots) <= MAX_GROUPS and total <= MAX_BYTES):
                break
            slot = self._slots[key]
            if slot.ready.is_set():
                total -= slot.nbytes
                del self._slots[key]

    def _handle(self, number: int) -> Any:
        """This thread's reader of file `number` (its reader of another file is closed)."""
        thread = threading.get_ident()
        with self._lock:
            held = self._handles.get(thread)
        if held is not None and held[0] == number:
            return held[1]
        handle = open_table(self.files[number])
        with self._lock:
            self._handles[thread] = (number, handle)
        if held is not None:
            _close(held[1])
        return handle

    def _forget_parent(self) -> None:
        """In a forked child: drop the parent's cache and readers (called under the lock)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._slots = OrderedDict()
            self._handles = {}

    def close(self) -> None:
        with self._lock:
            handles = [] if self._pid != os.getpid() else list(self._handles.values())
            self._handles = {}
            self._slots = OrderedDict()
            self._last = threading.local()
        for _, handle in handles:
            _close(handle)

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self.files, "column": self.column, "rows": self.rows,
                "fingerprint": self.fingerprint, "fields": self.fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]


def one_line(exc: BaseException) -> str:
    """An error's message on one line (pyarrow's run over several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _close(handle: Any) -> None:
    """Close a ParquetFile; an Arrow file's batches are a memory map, unmapped when the
    last of them goes (the cells read are copies)."""
    close = getattr(handle, "close", None)
    if close is not None:
        close()
