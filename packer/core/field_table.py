"""The per-sample side of fields: where each sample's fields lie, and their digest.

    fields.npy   structured (N,): offset, size (where the format keeps the sample's field
                 bytes, when it needs to know: the span of a wds sample's field members;
                 -1 / 0 elsewhere) and the xxh3-128 digest of the sample's fields record
                 (`pack_record`)

Written beside samples.npy only by a dataset with fields: a dataset without them has no
fields.npy. While a conversion runs, the table also holds every sample's fields record
(`records`, one blob + bounds): the journal keeps it with each part (so a resumed npy or
hdf5 run still has the fields of the parts it kept), and the writers of one-shot files
build their field columns from it at the end. The dataset folder never stores the
records: the format's files hold the values.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core import checks
from packer.core.checks import digest_of
from packer.core.fields import FieldSpec, specs_from_json, unpack_record
from packer.core.layout import FIELDS_NAME
from packer.errors import CorruptDatasetError
from packer.storage.files import atomic_writer

RECORDS_SUFFIX = "field-records.npy"  # journal only: the records blob
BOUNDS_SUFFIX = "field-bounds.npy"  # journal only: record i is blob[bounds[i]:bounds[i+1]]
FIELD_DTYPE = np.dtype([("offset", "<i8"), ("size", "<i8"), ("digest", "u1", (16,))])


class FieldRows:
    """Per-sample field locations and digests; the records too while a conversion runs."""

    def __init__(self, rows: npt.NDArray[np.void], records: npt.NDArray[np.uint8] | None = None,
                 bounds: npt.NDArray[np.int64] | None = None) -> None:
        self.rows = rows
        self.records = records
        self.bounds = bounds
        # Plain ndarray views of the columns (no copy): indexing a memmap makes a memmap
        # object each time, which costs more than the rest of reading a sample's fields.
        plain = rows.view(np.ndarray)
        self._digests, self._offsets, self._sizes = plain["digest"], plain["offset"], \
            plain["size"]

    def __len__(self) -> int:
        return len(self.rows)

    def digest(self, i: int) -> bytes:
        return bytes(self._digests[i])

    def digests(self, indices: Sequence[int]) -> list[bytes]:
        """The digests of several samples, with one lookup for all of them."""
        joined = self._digests[np.asarray(indices, dtype=np.intp)].tobytes()
        size = self._digests.shape[1]
        return [joined[k : k + size] for k in range(0, len(joined), size)]

    def locations(self, indices: Sequence[int]) -> tuple[list[int], list[int]]:
        """The offsets and sizes of several samples' field bytes, looked up at once."""
        wanted = np.asarray(indices, dtype=np.intp)
        return self._offsets[wanted].tolist(), self._sizes[wanted].tolist()

    def location(self, i: int) -> tuple[int, int]:
        return int(self._offsets[i]), int(self._sizes[i])

    def record(self, i: int) -> bytes:
        """Sample i's fields record (only while a conversion runs)."""
        if self.records is None or self.bounds is None:
            raise RuntimeError("the field records are kept only while a conversion runs")
        return bytes(self.records[int(self.bounds[i]) : int(self.bounds[i + 1])])


class FieldRowsBuilder:
    """Grows the field rows and records beside TableBuilder's columns."""

    def __init__(self) -> None:
        self._blocks: list[FieldRows] = []
        self._reset()

    def _reset(self) -> None:
        self._offsets = array("q")
        self._sizes = array("q")
        self._digests = bytearray()
        self._records = bytearray()
        self._stops = array("q")

    def add(self, record: bytes, offset: int, size: int) -> None:
        self._offsets.append(offset)
        self._sizes.append(size)
        self._digests += digest_of(record)
        self._records += record
        self._stops.append(len(self._records))

    def extend(self, rows: FieldRows) -> None:
        self._flush()
        self._blocks.append(rows)

    def _flush(self) -> None:
        count = len(self._offsets)
        if not count:
            return
        block = np.empty(count, FIELD_DTYPE)
        block["offset"] = np.frombuffer(self._offsets, np.int64)
        block["size"] = np.frombuffer(self._sizes, np.int64)
        block["digest"] = np.frombuffer(bytes(self._digests), np.uint8).reshape(count, -1)
        bounds = np.zeros(count + 1, np.int64)
        bounds[1:] = np.frombuffer(self._stops, np.int64)
        self._blocks.append(FieldRows(block, np.frombuffer(bytes(self._records), np.uint8),
                                      bounds))
        self._reset()

    def build(self) -> FieldRows:
        self._flush()
        blocks = self._blocks
        if not blocks:
            return FieldRows(np.empty(0, FIELD_DTYPE), np.empty(0, np.uint8), np.zeros(1, np.int64))
        if len(blocks) > 1:
            blocks = self._blocks = [joined(blocks)]
        return blocks[0]


def joined(blocks: list[FieldRows]) -> FieldRows:
    """One FieldRows of several, records rebased (those without records drop them)."""
    rows = np.concatenate([block.rows for block in blocks])
    if any(block.records is None or block.bounds is None for block in blocks):
        return FieldRows(rows)
    records = np.concatenate([block.records for block in blocks if block.records is not None])
    bounds = [np.zeros(1, np.int64)]
    base = 0
    for block in blocks:
        assert block.bounds is not None and block.records is not None
        bounds.append(block.bounds[1:] + base)
        base += len(block.records)
    return FieldRows(rows, records, np.concatenate(bounds))


def save_field_rows(folder: Path, rows: FieldRows, prefix: str = "",
                    with_records: bool = False) -> None:
    """Write fields.npy (and the records, for the journal) atomically."""
    with atomic_writer(folder / (prefix + FIELDS_NAME)) as handle:
        np.save(handle, np.ascontiguousarray(rows.rows))
    if with_records and rows.records is not None and rows.bounds is not None:
        for suffix, array_ in ((RECORDS_SUFFIX, rows.records), (BOUNDS_SUFFIX, rows.bounds)):
            with atomic_writer(folder / (prefix + suffix)) as handle:
                np.save(handle, np.ascontiguousarray(array_))


def load_field_rows(folder: Path, prefix: str = "", mmap: bool = True) -> FieldRows:
    """The fields.npy of a dataset (or journal part) that has one, with its records if
    kept."""
    path = folder / (prefix + FIELDS_NAME)
    rows = checks.load_array(path, mmap)
    if rows.dtype != FIELD_DTYPE:
        raise CorruptDatasetError(f"{path}: unexpected field table layout; reconvert the "
                                  "dataset")
    records_path = folder / (prefix + RECORDS_SUFFIX)
    if not records_path.exists():
        return FieldRows(rows)
    records = checks.load_array(records_path, mmap)
    bounds = checks.load_array(folder / (prefix + BOUNDS_SUFFIX), mmap)
    if len(bounds) != len(rows) + 1:
        raise CorruptDatasetError(f"{records_path}: does not match {path}; rerun with "
                                  "--overwrite")
    return FieldRows(rows, records, bounds)


def present_counts(specs: tuple[FieldSpec, ...], table: object) -> tuple[int, ...]:
    """How many samples of `table` (a SampleTable, with records) have a value, per field."""
    rows: FieldRows | None = getattr(table, "fields", None)
    if not specs or rows is None:
        return ()
    counts = [0] * len(specs)
    for i in range(len(rows)):
        for number, value in enumerate(unpack_record(rows.record(i), len(specs))):
            counts[number] += value is not None
    return tuple(counts)


def fields_from_json(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Index's `fields` and `field_counts` from index.json's `fields` (absent: none)."""
    entries = data.get("fields")
    try:
        if entries is not None and not all(isinstance(e, dict) for e in entries):
            raise ValueError("each field must be an object")
        plain = None if entries is None else [
            {k: v for k, v in e.items() if k != "num_present"} for e in entries]
        specs = specs_from_json(plain)
    except (ValueError, TypeError) as exc:
        raise checks.bad_field(path, f"fields: {exc}") from exc
    counts = tuple(checks.count(e, "num_present", path, default=0) for e in entries or ())
    return {"fields": specs, "field_counts": counts}
