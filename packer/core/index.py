"""The index of a packed dataset: `index.json` plus a compact per-sample table.

    index.json     format, version, counts, class names, shards (name, samples, bytes,
                   sha256), encode options, rejects, fields (name, type, num_present;
                   absent when the dataset has none); written last: its presence means
                   the dataset is complete
    samples.npy, keys.npy, fields.npy: the per-sample table (its names are re-exported
                   here)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core import checks
from packer.core.field_table import fields_from_json
from packer.core.fields import FieldSpec
from packer.core.layout import FIELDS_NAME as FIELDS_NAME
from packer.core.layout import INDEX_NAME as INDEX_NAME
from packer.core.layout import KEYS_NAME as KEYS_NAME
from packer.core.layout import REJECTS_NAME as REJECTS_NAME
from packer.core.layout import SAMPLES_NAME as SAMPLES_NAME
from packer.core.table import DIGEST_BYTES as DIGEST_BYTES
from packer.core.table import SAMPLE_DTYPE as SAMPLE_DTYPE
from packer.core.table import SampleTable as SampleTable
from packer.core.table import TableBuilder as TableBuilder
from packer.core.table import load_table as load_table
from packer.core.table import save_table as save_table
from packer.errors import CorruptDatasetError, IncompleteDatasetError
from packer.storage.files import Piece, write_atomic

FORMAT_VERSION = 2  # written; version 2 has shard pieces and lmdb/hdf5 parts (pack append)
READ_VERSIONS = (1, 2)  # read: a version-1 index is one without pieces or parts
SAMPLE_HASH = "xxh3-128"
# index.json's `extra` holds the digest of samples.npy + keys.npy, so a damaged label
# or key is refused like damaged image bytes (an index without it is not checked).
TABLE_DIGEST = "table_xxh3_128"


@dataclass(frozen=True)
class ShardInfo:
    """One data file of a dataset and what it must contain."""

    name: str
    num_samples: int
    num_bytes: int
    sha256: str  # of the file; with pieces, of the pieces' list
    pieces: tuple[Piece, ...] = ()  # (bytes, sha256) of consecutive ranges: npy only


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
        data["shards"] = [shard_json(shard) for shard in self.shards]
        if self.fields:  # only with fields: a dataset without them keeps the same index.json
            counts = self.field_counts or (0,) * len(self.fields)
            data["fields"] = [{**spec.to_json(), "num_present": count}
                              for spec, count in zip(self.fields, counts, strict=True)]
        return data


def shard_json(shard: ShardInfo) -> dict[str, Any]:
    """A shard's entry: pieces only where there are (other shards' entries stay plain)."""
    data: dict[str, Any] = {"name": shard.name, "num_samples": shard.num_samples,
                            "num_bytes": shard.num_bytes, "sha256": shard.sha256}
    if shard.pieces:
        data["pieces"] = [[size, digest] for size, digest in shard.pieces]
    return data


def shard_from_json(data: dict[str, Any]) -> ShardInfo:
    """The ShardInfo `shard_json` wrote (a journal's, a staging's: written by us)."""
    pieces = tuple((int(size), str(digest)) for size, digest in data.get("pieces", ()))
    return ShardInfo(data["name"], data["num_samples"], data["num_bytes"], data["sha256"],
                     pieces)


def table_files(folder: Path, index: Index) -> tuple[Path, ...]:
    """The files the table digest covers: samples and keys, and fields.npy with fields."""
    return (folder / SAMPLES_NAME, folder / KEYS_NAME) + \
        ((folder / FIELDS_NAME,) if index.fields else ())


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
    fmt = checks.version_and_format(data, path, READ_VERSIONS)
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
        **(fields_from_json(data, path) if "fields" in data else {}),
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
