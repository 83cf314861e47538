"""The index of a packed dataset: `index.json` plus a compact per-sample table.

    index.json     format, version, counts, class names, shards (name, samples, bytes,
                   sha256), encode options, rejects, fields (name, type, num_present;
                   absent when the dataset has none); written last: its presence means
                   the dataset is complete
    samples.npy    structured array, one row per sample: label, key start in keys.npy,
                   byte offset and size of the stored data inside its shard, digest
    keys.npy       uint8: all keys, UTF-8, concatenated
    fields.npy     only with fields: per-sample field location + digest (core.field_table)

Both tables open with `mmap_mode="r"`, so an index of a million samples loads in
milliseconds and DataLoader workers share its pages instead of copying Python lists.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core import checks
from packer.core.field_table import (
    FieldRows,
    FieldRowsBuilder,
    fields_from_json,
    load_field_rows,
    save_field_rows,
)
from packer.core.fields import FieldSpec
from packer.core.layout import FIELDS_NAME as FIELDS_NAME
from packer.core.layout import INDEX_NAME as INDEX_NAME
from packer.core.layout import KEYS_NAME as KEYS_NAME
from packer.core.layout import REJECTS_NAME as REJECTS_NAME
from packer.core.layout import SAMPLES_NAME as SAMPLES_NAME
from packer.errors import CorruptDatasetError, IncompleteDatasetError
from packer.storage.atomic import atomic_writer, write_atomic

FORMAT_VERSION = 1
SAMPLE_HASH = "xxh3-128"
# index.json's `extra` holds the digest of samples.npy + keys.npy, so a damaged label
# or key is refused like damaged image bytes (datasets written before it lack it).
TABLE_DIGEST = "table_xxh3_128"
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


@dataclass(frozen=True)
class ShardInfo:
    """One data file of a dataset and what it must contain."""

    name: str
    num_samples: int
    num_bytes: int
    sha256: str


@dataclass(frozen=True)
class Index:
    """What index.json says about a complete dataset."""

    format: str
    num_samples: int
    class_names: tuple[str, ...]
    shards: tuple[ShardInfo, ...]
    encode: dict[str, Any]
    num_rejected: int = 0
    num_ignored: int = 0
    image_size: tuple[int, int] | None = None
    format_version: int = FORMAT_VERSION
    sample_hash: str = SAMPLE_HASH
    extra: dict[str, Any] = field(default_factory=dict)
    fields: tuple[FieldSpec, ...] = ()
    field_counts: tuple[int, ...] = ()  # samples with a value, per field (pack info)

    @cached_property
    def shard_starts(self) -> npt.NDArray[np.int64]:
        """Index of the first sample of each shard, plus the total at the end."""
        counts = [shard.num_samples for shard in self.shards]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    def shard_of(self, sample: int) -> int:
        """Which shard holds sample `sample`."""
        return int(np.searchsorted(self.shard_starts, sample, side="right") - 1)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["class_names"] = list(self.class_names)
        data["image_size"] = list(self.image_size) if self.image_size else None
        del data["fields"], data["field_counts"]
        if self.fields:  # absent without fields: such a dataset's index.json is as before
            counts = self.field_counts or (0,) * len(self.fields)
            data["fields"] = [{**spec.to_json(), "num_present": count}
                              for spec, count in zip(self.fields, counts, strict=True)]
        return data


class SampleTable:
    """Per-sample keys, labels, locations and digests as numpy arrays (copy-on-read safe)."""

    def __init__(self, rows: npt.NDArray[np.void], keys_blob: npt.NDArray[np.uint8],
                 fields: FieldRows | None = None) -> None:
        self.rows = rows
        self.keys_blob = keys_blob
        self.fields = fields  # per-sample field locations and digests; None: no fields

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def labels(self) -> npt.NDArray[np.int64]:
        return self.rows["label"]

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        return self.rows["offset"]

    @property
    def sizes(self) -> npt.NDArray[np.int64]:
        return self.rows["size"]

    @property
    def digests(self) -> npt.NDArray[np.uint8]:
        return self.rows["digest"]

    def key(self, i: int) -> str:
        start = int(self.rows["key_start"][i])
        stop = int(self.rows["key_start"][i + 1]) if i + 1 < len(self.rows) else len(self.keys_blob)
        try:
            return bytes(self.keys_blob[start:stop]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptDatasetError(
                f"{KEYS_NAME}: the key of sample {i} is not UTF-8 ({exc.reason}); the "
                "per-sample table is damaged, reconvert the dataset"
            ) from exc

    def keys(self) -> list[str]:
        return [self.key(i) for i in range(len(self))]

    def digest(self, i: int) -> bytes:
        return bytes(self.rows["digest"][i])


COLUMNS = ("label", "key_start", "offset", "size")


class TableBuilder:
    """Accumulates per-sample rows compactly while a conversion runs.

    Columns grow in `array`s and a bytearray (about 1 µs per row, no Python object per
    sample); they become a numpy block only when built or extended.
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
        self._append_block(rows)
        self._keys += bytes(table.keys_blob)
        if table.fields is not None:
            if self._fields is None:
                self._fields = FieldRowsBuilder()
            self._fields.extend(table.fields)

    def _append_block(self, rows: npt.NDArray[np.void]) -> None:
        self._blocks.append(rows)
        self._num_blocked += len(rows)

    def _flush(self) -> None:
        count = len(self._columns[0])
        if not count:
            return
        block = np.empty(count, dtype=SAMPLE_DTYPE)
        for name, column in zip(COLUMNS, self._columns, strict=True):
            block[name] = np.frombuffer(column, dtype=np.int64)
        block["digest"] = np.frombuffer(bytes(self._digests), np.uint8).reshape(count, -1)
        self._append_block(block)
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


def table_files(folder: Path, index: Index) -> tuple[Path, ...]:
    """The files the table digest covers: samples and keys, and fields.npy with fields."""
    return (folder / SAMPLES_NAME, folder / KEYS_NAME) + \
        ((folder / FIELDS_NAME,) if index.fields else ())


def load_table(folder: Path, prefix: str = "", mmap: bool = True) -> SampleTable:
    """Open the per-sample table, memory-mapped by default."""
    rows = checks.load_array(folder / (prefix + SAMPLES_NAME), mmap)
    keys = checks.load_array(folder / (prefix + KEYS_NAME), mmap)
    if rows.dtype != SAMPLE_DTYPE or keys.dtype != np.uint8:
        raise CorruptDatasetError(
            f"{folder / (prefix + SAMPLES_NAME)}: unexpected table layout; reconvert the dataset"
        )
    fields = load_field_rows(folder, prefix, mmap)
    if fields is not None and len(fields) != len(rows):
        raise CorruptDatasetError(f"{folder / (prefix + FIELDS_NAME)}: {len(fields)} rows, "
                                  f"{len(rows)} samples; reconvert the dataset")
    return SampleTable(rows, keys, fields)


def write_index(folder: Path, index: Index) -> Index:
    """Write index.json last: from now on the dataset counts as complete.

    Adds the digest of the per-sample table (written before) and returns the index as
    written.
    """
    digest = checks.files_digest(table_files(folder, index))
    index = replace(index, extra={**index.extra, TABLE_DIGEST: digest})
    text = json.dumps(index.to_json(), indent=1, sort_keys=True, ensure_ascii=False)
    write_atomic(folder / INDEX_NAME, (text + "\n").encode("utf-8"))
    return index


def read_index(folder: str | Path) -> Index:
    """Read and validate index.json, refusing an unfinished or damaged dataset."""
    folder = Path(folder)
    path = folder / INDEX_NAME
    if not folder.is_dir():
        raise IncompleteDatasetError(f"{folder}: no such dataset folder; check the path")
    if not path.is_file():
        raise IncompleteDatasetError(
            f"no {INDEX_NAME} in {folder}: the conversion did not finish; rerun the same "
            "`pack convert SRC DST --to FMT` command with --resume"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CorruptDatasetError(f"{path}: cannot read ({exc}); check the file") from exc
    return parse_index(raw, path)


def parse_index(raw: bytes, path: Path) -> Index:
    """The Index in the bytes of an index.json (`path` names it in errors)."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=checks.no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise CorruptDatasetError(
            f"{path}: not valid JSON ({reason}); reconvert the dataset"
        ) from exc
    return index_from_json(data, path)



def index_from_json(data: Any, path: Path) -> Index:
    """Build an Index from parsed JSON, naming the file on any inconsistency."""
    fmt = checks.version_and_format(data, path, FORMAT_VERSION)
    shards = data.get("shards")
    if not isinstance(shards, list):
        raise checks.bad_field(path, f"shards must be a list, not {checks.quote(shards)}")
    index = Index(
        format=fmt,
        num_samples=checks.count(data, "num_samples", path),
        class_names=checks.class_names(data, path),
        shards=tuple(ShardInfo(**checks.shard_fields(shard, path)) for shard in shards),
        encode=checks.mapping(data, "encode", path),
        num_rejected=checks.count(data, "num_rejected", path),
        num_ignored=checks.count(data, "num_ignored", path, default=0),
        image_size=checks.image_size(data, path),
        sample_hash=checks.text(data, "sample_hash", path),
        extra=checks.mapping(data, "extra", path),
        **fields_from_json(data, path),
    )
    if index.sample_hash != SAMPLE_HASH:
        raise CorruptDatasetError(
            f"{path}: sample_hash {checks.quote(index.sample_hash)} is not supported (this "
            f"toolkit checks {SAMPLE_HASH}); upgrade the toolkit or reconvert the dataset"
        )
    if sum(shard.num_samples for shard in index.shards) != index.num_samples:
        raise CorruptDatasetError(
            f"{path}: shard sample counts do not add up to num_samples={index.num_samples}; "
            "the index is damaged, reconvert the dataset"
        )
    return index


def open_dataset(folder: str | Path) -> tuple[Index, SampleTable]:
    """Read index.json and the per-sample table, checking they agree."""
    folder = Path(folder)
    index = read_index(folder)
    table = load_table(folder)
    if len(table) != index.num_samples:
        raise CorruptDatasetError(
            f"{folder / SAMPLES_NAME}: {len(table)} rows but index.json says "
            f"{index.num_samples} samples; reconvert the dataset"
        )
    if bool(index.fields) != (table.fields is not None):
        raise CorruptDatasetError(f"{folder / FIELDS_NAME}: missing or unexpected for the "
                                  "fields index.json names; reconvert the dataset")
    checks.table_matches(table_files(folder, index), index.extra.get(TABLE_DIGEST))
    checks.check_rows(table.rows, table.keys_blob, len(index.class_names), folder / SAMPLES_NAME)
    return index, table
