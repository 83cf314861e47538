"""The replacements of an append (`--replace`), encoded into one plain spool file.

    .pack-append/replace/spool.bin    each replacement's stored bytes, back to back
    .pack-append/replace/staged.json  their extensions (and the staging's fingerprint)

A replacement goes where its old sample is, in a layout each format rebuilds its own way
(the replace step), so it is staged in no format at all: the writer loop puts its bytes
here and its key, label, digest and fields record in the staged table, whatever DST's
format. DST's own per-sample checks run on it as they would in a conversion (npy's row
size, hdf5's NUL-free strings), so a replacement DST cannot store is a reject, and its
old sample stays.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packer.core.fields import FieldSpec, unpack_record
from packer.core.index import SampleTable, ShardInfo
from packer.core.record import Record
from packer.formats._hdf5_strings import check_strings, string_fields
from packer.formats.base import Location
from packer.storage.files import sha256_file

SPOOL = "spool.bin"
REPLACE_DIR = "replace"


class SpoolWriter:
    """A Writer of one file, never resumed (a rerun encodes the replacements again)."""

    resumable = False

    def __init__(self, folder: Path, fields: tuple[FieldSpec, ...], fmt: str,
                 row_bytes: int | None) -> None:
        self.path = folder / SPOOL
        self.fields = fields
        self.row_bytes = row_bytes  # npy: every record is one row of pixels
        self._strings = string_fields(fields) if fmt == "hdf5" else []
        self._handle = open(self.path, "wb")  # closed by finish or abort
        self.exts: list[str] = []

    def part_full(self, next_size: int) -> bool:
        return False

    def add(self, record: Record) -> Location:
        if self.row_bytes is not None and len(record.data) != self.row_bytes:
            raise ValueError(f"{record.key}: {len(record.data)} pixel bytes, expected "
                             f"{self.row_bytes}")
        if self._strings:
            check_strings(self.fields, self._strings, record.fields)
        offset = self._handle.tell()
        self._handle.write(record.data)
        self.exts.append(record.ext)
        return Location(offset, len(record.data))

    def end_part(self) -> None:
        self._handle.flush()

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        return (ShardInfo(SPOOL, len(table), self.path.stat().st_size, sha256_file(self.path)),)

    def abort(self) -> None:
        self._handle.close()


@dataclass(frozen=True)
class Replacements:
    """The staged replacements: replacement j takes the place of DST's sample `at[j]`."""

    at: list[int]
    table: SampleTable  # spool offsets and sizes, digests, labels, field records
    exts: tuple[str, ...]
    path: Path
    num_fields: int

    def data(self, j: int) -> bytes:
        with open(self.path, "rb") as handle:
            return os.pread(handle.fileno(), int(self.table.sizes[j]), int(self.table.offsets[j]))

    def values(self, j: int) -> list[bytes | None]:
        """Replacement j's field values in byte form, DST's fields in DST's order."""
        if self.table.fields is None:
            return []
        return unpack_record(self.table.fields.record(j), self.num_fields)

    def record(self, j: int) -> Record:
        fields = b"" if self.table.fields is None else self.table.fields.record(j)
        return Record(j, self.table.key(j), int(self.table.labels[j]), self.data(j),
                      self.exts[j], self.table.digest(j), fields)

    def by_index(self) -> dict[int, int]:
        """{DST sample index: replacement j}."""
        return {i: j for j, i in enumerate(self.at)}
