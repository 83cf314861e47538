"""`--replace` in each format: a replaced sample keeps its index, its key and its place
in the split files; its bytes, label, digest and fields become its replacement's.

    lmdb   the dataset is written again as one data.mdb: a copy of the first part with
           every other part's keys and the new samples' put in, then the replacements
           put over the old values (the old sample's field keys deleted first)
    hdf5   the dataset is written again as one data.h5: the blob laid out in sample
           order from every part, the replaced samples' bytes taken from the spool;
           offsets follow
    npy    images.npy, which an append otherwise grows in place, is copied (a reflink
           where the file system has them) and the replaced rows overwritten in the copy,
           so a reader that has it open keeps reading the old file
    wds    each shard that holds a replaced sample is written again, under its own name,
           with every other sample's members byte for byte as they were
           (`rewrite_shards`)

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
from packer.formats import _lmdb_writer

Segment = tuple[Path, int, int]  # (file, start, size)
Part = tuple[Path, int, int]  # (file, where its blob starts, its first sample)


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
        txn.put(key, _lmdb_writer.pack_value(record.label, record.ext, record.data))
        for name, value in zip(names, replaced.values(j), strict=True):
            field_key = _lmdb_writer.field_key(key, name)
            txn.delete(field_key)
            if value is not None:
                txn.put(field_key, value)


def blob_segments(parts: list[Part], table: SampleTable, replaced: Replacements
                  ) -> tuple[list[Segment], np.ndarray]:
    """The pieces of one hdf5 blob of DST's samples in order (runs of old bytes from
    each part, the replaced samples' bytes from the spool) and each sample's offset in
    it. `parts`: (file, where its blob starts, its first sample) of each of DST's parts."""
    sizes = np.array(table.sizes, dtype=np.int64)
    taken: dict[int, Segment] = {  # sample -> its new bytes
        i: (replaced.path, int(replaced.table.offsets[j]), int(replaced.table.sizes[j]))
        for i, j in replaced.by_index().items()}
    for i, (_, _, size) in taken.items():
        sizes[i] = size
    offsets = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    segments: list[Segment] = []
    start = 0  # the first sample of the run of old bytes not yet taken
    for i in sorted(taken):
        segments += _old_runs(parts, table, start, i)
        segments.append(taken[i])
        start = i + 1
    segments += _old_runs(parts, table, start, len(sizes))
    return segments, offsets


def _old_runs(parts: list[Part], table: SampleTable, start: int, stop: int) -> list[Segment]:
    """The old bytes of samples start..stop-1: one run in each part they span."""
    runs: list[Segment] = []
    bounds = [first for _, _, first in parts[1:]] + [len(table)]
    for (path, at, first), end in zip(parts, bounds, strict=True):
        lo, hi = max(start, first), min(stop, end)
        if hi > lo:
            begin = int(table.offsets[lo])
            runs.append((path, at + begin, int(table.offsets[hi - 1]) + int(table.sizes[hi - 1])
                         - begin))
    return runs


def write_rows(out: int, replaced: Replacements, header: int, row: int) -> None:
    """Overwrite npy rows in the open file `out` with the replacements' pixels."""
    for j, i in enumerate(replaced.at):
        os.pwrite(out, replaced.data(j), header + i * row)
