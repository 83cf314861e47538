"""Parquet files with image bytes as the source: one file, a folder of them (the Hugging
Face Hub's `data/train-00000-of-00002.parquet`), a quoted glob (`'data/train-*.parquet'`),
or a folder `datasets.Dataset.save_to_disk` wrote (Arrow IPC files + state.json).

Each row is a sample: its image from the image column, its label from the label column,
its other columns as fields (`layout_of`). The key is the file's path relative to SRC
without its suffix, then the row number, zero-padded
(`data/train-00000-of-00002/00000012`), so key order is file and row order and sample i is
the same row every time. An item's path names the file and the row
(`data/train-00000-of-00002.parquet:row 12`, rows counted from 0), which is what a reject
names.

The scan reads the footers and the label and field columns, never the images; the images
are read in place, a row group at a time (`ParquetSource`). A row without a label (null,
or a class id out of range) or with a field that is not its type is a reject here; a
null or undecodable image is one when it is encoded. Without a label column every sample
is class 0 of one class, `unlabelled`, and a warning says so. Its files: `listing`.
pyarrow is an optional extra, imported when a Parquet source is scanned.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from packer.core.fields import FieldValueError, pack_record
from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.fields import FieldChoice
from packer.source.items import ItemsBuilder, SourceItems
from packer.source.kinds import Source, is_utf8
from packer.source.manifest import MAX_CLASSES
from packer.source.parquet_columns import Layout, layout_of, row_records
from packer.source.parquet_files import describe, listing
from packer.source.parquet_read import ParquetSource, RowTable, TableFile, load_pyarrow, open_table
from packer.source.wds_labels import UNLABELLED

__all__ = ["scan_parquet"]

BATCH_ROWS = 4096  # rows of label and field columns read at a time
log = logging.getLogger(__name__)


def scan_parquet(path: Path, choice: FieldChoice) -> Source:
    """The rows of the Parquet (or Arrow) files at `path` as items (module docstring)."""
    load_pyarrow(str(path))
    root, paths = listing(path)
    files, schema = describe(paths)
    layout = layout_of(schema, choice, str(paths[0]))
    if choice.label not in (None, "none"):
        raise SourceError(f"{path}: --label {choice.label} does not apply to Parquet; the "
                          "label is the `label` (or ClassLabel) column, or --label none")
    if choice.label == "none":
        layout = dataclasses.replace(layout, label=None, names=None)
    elif layout.label is None:
        log.warning("%s: no label column; every sample is class 0 (%r); pass --label none "
                    "to say so", paths[0], UNLABELLED)
    names, lookup = _class_names(files, schema, layout)
    prefix = "" if str(root) == "." else os.path.join(str(root), "")
    found = ItemsBuilder(prefix, errors="strict")
    numbers, rows = array("i"), array("q")
    rejects: list[Reject] = []
    for number, file in enumerate(files):
        rel = os.path.relpath(file.path, root)
        if not is_utf8(rel):
            raise SourceError(f"{file.path}: file name is not valid UTF-8; rename it")
        stem = rel[: -len(Path(rel).suffix) or None].replace(os.sep, "/")
        width = max(8, len(str(int(file.starts[-1]))))
        for row, label, record in _rows(file, layout, names, lookup, rejects, prefix + rel):
            found.add(f"{stem}/{row:0{width}d}", f"{rel}:row {row}", label, record)
            numbers.append(number)
            rows.append(row)
    built = found.build(rejects)
    order = found.order
    table = RowTable(np.asarray(numbers, np.int32)[order], np.asarray(rows, np.int64)[order])
    origin = ParquetSource(tuple(files), layout.image, table,
                           _identity(files, root, schema, layout, table), built.fields)
    items = SourceItems(built.prefix, built.keys, built.tails, built.labels, origin,
                        fields=built.fields)
    rejects.sort(key=lambda reject: reject.path)
    return Source(path, items, names, rejects, archive=origin, fields=layout.fields)


def _class_names(files: list[TableFile], schema: Any, layout: Layout
                 ) -> tuple[tuple[str, ...], dict[str, int] | None]:
    """Class names (ClassLabel's, the sorted distinct strings, or the ids 0..max) and,
    for a column of names, each name's class id."""
    if layout.label is None:
        return (UNLABELLED,), None
    kind = _label_type(load_pyarrow(files[0].path), schema, layout.label, files[0].path)
    if kind == "int" and layout.names is not None:
        return layout.names, None
    seen: set[Any] = set()
    for file in files:
        for columns in _batches(file, [layout.label]):
            seen.update(columns[0].to_pylist())  # to_pylist: no pandas import, as to_numpy
    seen.discard(None)
    if kind == "str":
        names = tuple(sorted(seen))
        return names, {name: label for label, name in enumerate(names)}
    top = max(seen, default=-1)
    if top >= MAX_CLASSES:
        raise SourceError(f"{files[0].path}: label {top} is no class id (at most "
                          f"{MAX_CLASSES} classes); store class names, or ids from 0")
    return tuple(str(i) for i in range(top + 1)), None


def _label_type(pa: Any, schema: Any, label: str, where: str) -> str:
    """"int" or "str": what the label column holds; anything else is refused."""
    kind = schema.field(label).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "str"
    raise SourceError(f"{where}: column {label!r} holds {kind}; labels are "
                      "integer class ids or class names (strings)")


def _batches(file: TableFile, names: list[str]) -> Any:
    """The columns `names` of a file, BATCH_ROWS rows at a time (lists of pyarrow arrays)."""
    handle = open_table(file)
    if file.kind == "parquet":
        try:
            for batch in handle.iter_batches(BATCH_ROWS, columns=names, use_threads=False):
                yield [batch.column(name) for name in names]
        finally:
            handle.close()
        return
    for batch in handle:
        yield [batch.column(name) for name in names]


def _rows(file: TableFile, layout: Layout, names: tuple[str, ...],
          lookup: dict[str, int] | None, rejects: list[Reject], where: str) -> Any:
    """(row, label, fields record) of each usable row; the others go to `rejects`."""
    specs = layout.fields
    wanted = ([layout.label] if layout.label is not None else []) + [s.name for s in specs]
    if not wanted:  # no label and no fields: every row is class 0
        yield from ((row, 0, b"") for row in range(int(file.starts[-1])))
        return
    row = 0
    for columns in _batches(file, wanted):
        labels: list[Any] = columns[0].to_pylist() if layout.label is not None \
            else [0] * len(columns[0])
        if lookup is not None:
            labels = [lookup.get(label) for label in labels]
        values = [column.to_pylist() for column in columns[-len(specs):]] if specs else []
        for k, label in enumerate(labels):
            reason = _label_problem(label, len(names))
            record = b""
            if reason is None and specs:
                try:
                    record = pack_record(row_records(specs, values, k))
                except FieldValueError as exc:
                    reason = f"bad field: {exc}"
            if reason is None:
                yield row + k, label, record
            else:
                rejects.append(Reject(-1, f"{where}:row {row + k}", reason))
        row += len(labels)


def _label_problem(label: int | None, count: int) -> str | None:
    if label is None:
        return "no label: the label cell is null"
    if not 0 <= label < count:
        return f"label {label} is not a class id (0..{count - 1})"
    return None


def _identity(files: list[TableFile], root: Path, schema: Any, layout: Layout,
              table: RowTable) -> str:
    """The files' fingerprint for resume: names, sizes, mtimes, schema and the row table."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{os.path.relpath(file.path, root)}\0{file.kind}\0{file.stat.size}\0"
                      f"{file.stat.mtime_ns}\n".encode("utf-8", "surrogateescape"))
    digest.update(schema.to_string(show_schema_metadata=True).encode())
    digest.update(f"{layout.image}\0{layout.label}\n".encode())
    digest.update(table.files.tobytes())
    digest.update(table.rows.tobytes())
    return digest.hexdigest()
