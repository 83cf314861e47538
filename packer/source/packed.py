"""A packed dataset as the source of a conversion: format to format, no images needed.

The items are the dataset's samples in its order, with its keys, labels and class
names; item i (position i) is sample i. `read` returns a sample's stored bytes through
its format's RecordReader, which checks the sample's digest, so a damaged sample
becomes a reject with the reason. An item's path (the dataset folder joined with the
key) only names the sample in rejects.jsonl.

Readers open lazily where they read and never travel through pickle (a pickled source
is its folder and the hash of its index.json). They come from the process's one registry
of opened datasets, shared with `readers`' datasets on the same folder: one reader per
process for lmdb (py-lmdb refuses to open an environment twice in a process), hdf5 and npy
(their reads are thread-safe), one per thread for wds (its reader keeps an LRU of open
shards).

A converted dataset records in `index.extra["source"]` what it was made from (format,
hash of its index.json, whether the bytes were copied unchanged and whether they are
still the original image files), which `pack verify --source` uses to decide whether
sample digests must match.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from packer import formats
from packer.core.fields import FieldSpec, FieldValueError, encode_value, pack_record, parse_text
from packer.core.index import INDEX_NAME, REJECTS_NAME, Index, SampleTable, open_dataset
from packer.core.record import Reject, SourceItem
from packer.dataset import open as dataset_open
from packer.encode import EncodeOptions
from packer.errors import PackError, RejectReason, SourceError
from packer.formats.base import RecordReader
from packer.source.items import SourceItems, Strings


def _shared(folder: Path, fingerprint: str | None = None) -> dataset_open.Opened:
    """This process's entry for a packed dataset (`opened`), shared with every
    PackedSource and every `readers` dataset on it in the process.

    `fingerprint`: the index.json hash the dataset must still have.
    """
    try:
        try:
            key = dataset_open.local_version(folder)
        except OSError:
            open_dataset(folder)  # raises the error that says what is wrong with the folder
            raise
        opened = dataset_open.opened(key, keep=True)
    except PackError as exc:
        raise SourceError(f"source dataset {exc}") from exc
    except OSError as exc:
        raise SourceError(f"{folder / INDEX_NAME}: cannot read the source dataset "
                          f"({exc.strerror or exc})") from exc
    if fingerprint is not None and opened.sha256 != fingerprint:
        raise SourceError(f"{folder}: the source dataset changed during the conversion; "
                          "convert again")
    return opened


class PackedSource:
    """Reads the samples of a packed dataset for encoding (see the module docstring)."""

    whole_files = False  # stored samples, not files (`Origin.whole_files`)

    def __init__(self, folder: Path, fields: tuple[FieldSpec, ...] = ()) -> None:
        self.folder = Path(os.path.abspath(folder))
        self._opened = _shared(self.folder)
        self.fields = fields  # the source's fields this conversion keeps

    @property
    def index(self) -> Index:
        return self._opened.index

    @property
    def table(self) -> SampleTable:
        return self._opened.table

    @property
    def fingerprint(self) -> str:
        """The sha256 of the dataset's index.json (which pins every shard's sha256)."""
        return self._opened.sha256

    @property
    def pixel_size(self) -> tuple[int, int] | None:
        """(height, width) of the raw pixels an npy dataset stores; None: encoded images."""
        return self.index.image_size if formats.load(self.index.format).STORES_PIXELS else None

    def _reader(self) -> RecordReader:
        """A reader of this thread, reopened after a fork or after `close`."""
        if not dataset_open.is_current(self._opened):
            self._opened = _shared(self.folder, self._opened.sha256)
        return self._opened.reader()

    def items(self, prefix: str) -> SourceItems:
        """Sample i as item i: key and label from the table (memory-mapped, not copied)."""
        starts = self.table.rows["key_start"]
        ends = np.concatenate([starts[1:], [len(self.table.keys_blob)]])
        stops = ends[: len(starts)].astype(np.int64)
        keys = Strings(bytes(self.table.keys_blob), starts, stops)
        return SourceItems(prefix, keys, None, self.table.labels, self)

    def open(self) -> None:
        """Open the shared reader now, so that a dataset that cannot be read stops the run."""
        if formats.load(self.index.format).THREAD_SAFE_READER:
            try:
                self._reader()
            except PackError as exc:
                raise SourceError(f"source dataset {exc}") from exc

    def read(self, item: SourceItem) -> bytes:
        """The stored bytes of sample `item.position`; a damaged sample raises RejectReason."""
        try:
            return self._reader().read(item.position)
        except PackError as exc:
            raise RejectReason(f"damaged in the source dataset: {exc}") from exc

    def read_fields(self, item: SourceItem) -> bytes:
        """The fields record of sample `item.position`, of the fields kept (b"": none)."""
        if not self.fields:
            return b""
        try:
            values = self._reader().fields(item.position, [s.name for s in self.fields])
        except PackError as exc:
            raise RejectReason(f"damaged in the source dataset: {exc}") from exc
        try:
            return pack_record([None if values[spec.name] is None
                                else _encoded(spec, values[spec.name]) for spec in self.fields])
        except FieldValueError as exc:
            raise RejectReason(f"a field does not fit its --field type: {exc}") from exc

    def digest(self, i: int) -> bytes:
        return self.table.digest(i)

    def close(self) -> None:
        """Close this process's readers of the dataset, for every holder (they reopen)."""
        dataset_open.release(self._opened.key)

    def copies(self, options: EncodeOptions) -> bool:
        """Whether converting with `options` stores every sample's bytes unchanged."""
        if self.pixel_size is not None:
            return options.pixels and options.size == self.pixel_size
        return not options.transforms and not options.pixels

    def lineage(self, options: EncodeOptions) -> dict[str, Any]:
        """What `index.extra["source"]` of a dataset converted from this one says."""
        copied = self.copies(options)
        return {"format": self.index.format, "index_sha256": self.fingerprint, "copy": copied,
                "original": copied and stores_original(self.index)}

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "fingerprint": self.fingerprint, "fields": self.fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.folder = state["folder"]
        self.fields = state["fields"]
        self._opened = _shared(self.folder, state["fingerprint"])


def stores_original(index: Index) -> bool:
    """Whether a dataset's samples are the original image files, byte for byte."""
    if index.encode.get("mode") != "passthrough":
        return False
    source = index.extra.get("source")
    return not isinstance(source, dict) or bool(source.get("original"))


def read_rejects(folder: Path) -> list[Reject]:
    """The rejects a packed dataset lists in rejects.jsonl."""
    path = folder / REJECTS_NAME
    try:
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [Reject(-1, str(entry["path"]), str(entry["reason"]))
                for entry in map(json.loads, filter(str.strip, lines))]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{path}: unreadable rejects list of the source dataset ({exc}); "
                          "reconvert it") from exc


def _encoded(spec: FieldSpec, value: object) -> bytes:
    """A source value in `spec`'s byte form. Its type may differ from the source's
    (--field boxes:floats over json boxes): an array becomes a list for json, a string
    is read as a manifest cell is (str -> int, float, json, floats, ints)."""
    try:
        if isinstance(value, np.ndarray) and spec.type == "json":
            value = value.tolist()
        elif isinstance(value, str) and spec.type not in ("str", "bytes"):
            return parse_text(spec.type, value)
        return encode_value(spec.type, value)
    except FieldValueError as exc:
        raise FieldValueError(f"field {spec.name!r} ({spec.type}): {exc}") from exc
