"""`--replace` in each format: a replaced sample keeps its index, its key and its place
in the split files; its bytes, label, digest and fields become its replacement's.

    lmdb   the copy of data.mdb that an append writes anyway gets the new values put over
           the old ones (and the old sample's field keys deleted first)
    hdf5   the blob that an append rebuilds anyway is laid out again in sample order,
           the replaced samples' bytes taken from the spool; offsets follow
    npy    images.npy, which an append otherwise grows in place, is copied (a reflink
           where the file system has them) and the replaced rows overwritten in the copy,
           so a reader that has it open keeps reading the old file
    wds    each shard that holds a replaced sample is written again, under its own name,
           with every other sample's members byte for byte as they were
           (packer.conversion.append.replace_wds)

Every one of them is built in the staging folder and renamed in at the commit, so
DST stays the old dataset until index.json lands, as for any append.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from packer.conversion.append.spool import Replacements
from packer.core.field_table import FieldRows
from packer.core.index import SampleTable
from packer.formats import _lmdb

Segment = tuple[Path, int, int]  # (file, start, size)


def replaced_rows(table: SampleTable, replaced: Replacements | None) -> SampleTable:
    """DST's table with each replaced sample's label, size, digest and field digest its
    replacement's; offsets as they were (a format that moves bytes sets its own)."""
    if replaced is None:
        return table
    rows = np.array(table.rows, copy=True)
    at = np.asarray(replaced.at, dtype=np.intp)
    new = replaced.table.rows
    for column in ("label", "size", "digest"):
        rows[column][at] = new[column]
    fields = table.fields
    if fields is not None and replaced.table.fields is not None:
        field_rows = np.array(fields.rows, copy=True)
        field_rows["digest"][at] = replaced.table.fields.rows["digest"]
        fields = FieldRows(field_rows)
    return SampleTable(rows, table.keys_blob, fields)


def put_lmdb(txn: Any, table: SampleTable, names: list[str], replaced: Replacements) -> None:
    """Write each replacement over its sample's value and field keys in an open write
    transaction of DST's copy."""
    for j, i in enumerate(replaced.at):
        key = table.key(i).encode("utf-8")
        record = replaced.record(j)
        txn.put(key, _lmdb.pack_value(record.label, record.ext, record.data))
        for name, value in zip(names, replaced.values(j), strict=True):
            field_key = _lmdb.field_key(key, name)
            txn.delete(field_key)
            if value is not None:
                txn.put(field_key, value)


def blob_segments(old: Path, old_at: int, table: SampleTable, replaced: Replacements | None
                  ) -> tuple[list[Segment], np.ndarray]:
    """The pieces of an hdf5 blob of DST's samples in order (runs of old bytes, the
    replaced samples' bytes from the spool) and each sample's new offset."""
    sizes = np.asarray(table.sizes, dtype=np.int64)
    if replaced is None or not replaced.at:
        total = int(sizes.sum())
        return [(old, old_at, total)] if total else [], np.asarray(table.offsets, np.int64)
    by_index = replaced.by_index()
    sizes = sizes.copy()
    sizes[list(by_index)] = [int(replaced.table.sizes[j]) for j in by_index.values()]
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    segments: list[Segment] = []
    start = 0  # the first sample of the run of old bytes not yet taken
    for i in sorted(by_index):
        segments += _old_run(old, old_at, table, start, i)
        j = by_index[i]
        segments.append((replaced.path, int(replaced.table.offsets[j]), int(sizes[i])))
        start = i + 1
    segments += _old_run(old, old_at, table, start, len(sizes))
    return segments, offsets


def _old_run(old: Path, old_at: int, table: SampleTable, start: int, stop: int
             ) -> list[Segment]:
    if stop <= start:
        return []
    first = int(table.offsets[start])
    end = int(table.offsets[stop - 1]) + int(table.sizes[stop - 1])
    return [(old, old_at + first, end - first)]


def write_rows(out: int, replaced: Replacements, header: int, row: int) -> None:
    """Overwrite npy rows in the open file `out` with the replacements' pixels."""
    for j, i in enumerate(replaced.at):
        os.pwrite(out, replaced.data(j), header + i * row)
