"""The per-sample table of a packed dataset: samples.npy + keys.npy (+ fields.npy).

    samples.npy    structured array, one row per sample: label, key start in keys.npy,
                   byte offset and size of the stored data inside its shard, digest
    keys.npy       uint8: all keys, UTF-8, concatenated
    fields.npy     only with fields: per-sample field location + digest

Both open with `mmap_mode="r"`, so a table loads without parsing and DataLoader workers
share its pages. `TableBuilder` grows one while a conversion runs. index.json, beside
them, describes the whole dataset and carries the table's digest.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packer.core import checks
from packer.core.field_table import FieldRows, FieldRowsBuilder, load_field_rows, save_field_rows
from packer.core.layout import FIELDS_NAME, KEYS_NAME, SAMPLES_NAME
from packer.errors import CorruptDatasetError
from packer.storage.files import atomic_writer

DIGEST_BYTES = 16


SAMPLE_DTYPE = np.dtype(
    [
        ("label", "<i8"),
        ("key_start", "<i8"),
        ("offset", "<i8"),
        ("size", "<i8"),
        ("digest", "u1", (DIGEST_BYTES,)),
    ]
)


class SampleTable:
    """Per-sample keys, labels, locations and digests as numpy arrays (copy-on-read safe).

    The rows and each column are plain ndarray views of the (memory-mapped) arrays: a
    reader looks up several values a sample, and indexing an np.memmap builds a memmap
    object each time, which costs more than the lookup itself.
    """

    def __init__(self, rows: npt.NDArray[np.void], keys_blob: npt.NDArray[np.uint8],
                 fields: FieldRows | None = None) -> None:
        self.rows = rows.view(np.ndarray)
        self.keys_blob = keys_blob.view(np.ndarray)
        self.fields = fields  # per-sample field locations and digests; None: no fields
        self.labels: npt.NDArray[np.int64] = self.rows["label"]
        self.offsets: npt.NDArray[np.int64] = self.rows["offset"]
        self.sizes: npt.NDArray[np.int64] = self.rows["size"]
        self.digests: npt.NDArray[np.uint8] = self.rows["digest"]
        self._key_starts: npt.NDArray[np.int64] = self.rows["key_start"]

    def __len__(self) -> int:
        return len(self.rows)

    def key(self, i: int) -> str:
        starts = self._key_starts
        start = int(starts[i])
        stop = int(starts[i + 1]) if i + 1 < len(starts) else len(self.keys_blob)
        try:
            return bytes(self.keys_blob[start:stop]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptDatasetError(
                f"{KEYS_NAME}: the key of sample {i} is not UTF-8 ({exc.reason}); the "
                "per-sample table is damaged, reconvert the dataset"
            ) from exc

    def key_bytes_many(self, indices: Sequence[int]) -> list[bytes]:
        """The UTF-8 keys of several samples, their bounds looked up at once (lmdb's
        field keys are built from them; not decoded, so not checked as UTF-8 here)."""
        wanted = np.asarray(indices, dtype=np.intp)
        starts = self._key_starts
        last = wanted + 1 >= len(starts)
        stops = np.where(last, len(self.keys_blob), starts[np.where(last, 0, wanted + 1)])
        blob = self.keys_blob.data
        return [blob[start:stop].tobytes() for start, stop in
                zip(starts[wanted].tolist(), stops.tolist(), strict=True)]

    def keys(self) -> list[str]:
        return [self.key(i) for i in range(len(self))]

    def digest(self, i: int) -> bytes:
        return bytes(self.digests[i])


COLUMNS = ("label", "key_start", "offset", "size")


class TableBuilder:
    """Accumulates per-sample rows compactly while a conversion runs.

    Columns grow in `array`s and a bytearray (no Python object per sample); they become
    a numpy block only when built or extended.
    """

    def __init__(self) -> None:
        self._blocks: list[npt.NDArray[np.void]] = []
        self._num_blocked = 0
        self._columns = tuple(array("q") for _ in COLUMNS)
        self._digests = bytearray()
        self._keys = bytearray()
        self._fields: FieldRowsBuilder | None = None  # made by the first row with fields

    def __len__(self) -> int:
        return self._num_blocked + len(self._columns[0])

    def add_fields(self, record: bytes, offset: int = -1, size: int = 0) -> None:
        """The fields record of the row added last, and where the format put it."""
        if self._fields is None:
            self._fields = FieldRowsBuilder()
        self._fields.add(record, offset, size)

    def add(self, key: str, label: int, offset: int, size: int, digest: bytes) -> None:
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"a sample digest has {DIGEST_BYTES} bytes, not {len(digest)}")
        labels, key_starts, offsets, sizes = self._columns
        labels.append(label)
        key_starts.append(len(self._keys))
        offsets.append(offset)
        sizes.append(size)
        self._digests += digest
        self._keys += key.encode("utf-8")

    def extend(self, table: SampleTable) -> None:
        """Append the rows of an earlier part (resume), rebasing key positions."""
        self._flush()
        rows = np.array(table.rows, copy=True)
        rows["key_start"] += len(self._keys)
        self._blocks.append(rows)
        self._num_blocked += len(rows)
        self._keys += bytes(table.keys_blob)
        if table.fields is not None:
            if self._fields is None:
                self._fields = FieldRowsBuilder()
            self._fields.extend(table.fields)

    def _flush(self) -> None:
        count = len(self._columns[0])
        if not count:
            return
        block = np.empty(count, dtype=SAMPLE_DTYPE)
        for name, column in zip(COLUMNS, self._columns, strict=True):
            block[name] = np.frombuffer(column, dtype=np.int64)
        block["digest"] = np.frombuffer(self._digests, np.uint8).reshape(count, -1)  # no copy
        self._blocks.append(block)
        self._num_blocked += count
        self._columns = tuple(array("q") for _ in COLUMNS)
        self._digests = bytearray()

    def build(self) -> SampleTable:
        self._flush()
        if len(self._blocks) > 1:  # one block from here on: later builds copy nothing
            self._blocks = [np.concatenate(self._blocks)]
        rows = self._blocks[0] if self._blocks else np.empty(0, SAMPLE_DTYPE)
        fields = self._fields.build() if self._fields is not None else None
        return SampleTable(rows, np.frombuffer(bytes(self._keys), dtype=np.uint8), fields)


def save_table(folder: Path, table: SampleTable, prefix: str = "",
               with_records: bool = False) -> None:
    """Write the per-sample table atomically (`with_records`: the journal's field records)."""
    with atomic_writer(folder / (prefix + SAMPLES_NAME)) as handle:
        np.save(handle, np.ascontiguousarray(table.rows))
    with atomic_writer(folder / (prefix + KEYS_NAME)) as handle:
        np.save(handle, np.ascontiguousarray(table.keys_blob))
    if table.fields is not None:
        save_field_rows(folder, table.fields, prefix, with_records)


def load_table(folder: Path, prefix: str = "", mmap: bool = True) -> SampleTable:
    """Open the per-sample table, memory-mapped by default."""
    rows = checks.load_array(folder / (prefix + SAMPLES_NAME), mmap)
    keys = checks.load_array(folder / (prefix + KEYS_NAME), mmap)
    if rows.dtype != SAMPLE_DTYPE or keys.dtype != np.uint8:
        raise CorruptDatasetError(
            f"{folder / (prefix + SAMPLES_NAME)}: unexpected table layout; reconvert the dataset"
        )
    has_fields = (folder / (prefix + FIELDS_NAME)).exists()
    fields = load_field_rows(folder, prefix, mmap) if has_fields else None
    if fields is not None and len(fields) != len(rows):
        raise CorruptDatasetError(f"{folder / (prefix + FIELDS_NAME)}: {len(fields)} rows, "
                                  f"{len(rows)} samples; reconvert the dataset")
    return SampleTable(rows, keys, fields)
