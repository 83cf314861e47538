"""Step two of an append: the grown dataset's data files, built in `.pack-append/ready/`.

    wds    the staged shards are already DST's next shards: nothing to build but the
           wids index of every shard (their field members are in them)
    npy    labels.npy and fields/; images.npy grows in place at the commit: the
           staged rows go after DST's, then the header names the new count
    hdf5   the staged data.h5 is DST's next part, data.parts/data-NNNNN.h5
    lmdb   the staged data.mdb is DST's next part, data.lmdb/data-NNNNN.mdb
           (parts: old files are neither copied nor hashed again)

With `--replace`, each format also puts the replacements in their samples' places
(the replace step); hdf5 and lmdb then write the whole dataset again as one file.

Bytes move with copy_file_range (the kernel copies, a reflink where the file system has
them): no image is decoded or re-encoded, and DST's files are only read, so DST stays
the complete old dataset until the commit renames these in. Old samples keep their rows,
offsets and digests; new rows follow, their offsets shifted past the old data where they
share one file.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import lmdb
import numpy as np

from packer.conversion.append.commit import Merged, copy_range
from packer.conversion.append.plan import AppendPlan
from packer.conversion.append.replace import blob_segments, put_lmdb, replaced_rows, write_rows
from packer.conversion.append.replace_wds import rewrite_shards
from packer.conversion.append.spool import REPLACE_DIR, SPOOL, Replacements
from packer.conversion.append.stage import READY, Staged, stage_dir
from packer.conversion.append.values import all_columns, field_counts
from packer.core.index import SampleTable, ShardInfo, TableBuilder
from packer.formats import _hdf5_writer, _lmdb_writer, _npy, _npy_fields
from packer.formats._parts import part_name
from packer.formats._wds_names import stem_of
from packer.formats._wids import index_extra
from packer.storage.files import Piece, atomic_writer, fsync_path, sha256_file, sha256_range


def merge(plan: AppendPlan, staged: Staged, spooled: Staged | None) -> Merged:
    """Build the grown dataset's files in the staging folder's `ready/` (the replacements
    `spooled`, when any was not a reject)."""
    where = stage_dir(plan.folder)
    ready = where / READY
    shutil.rmtree(ready, ignore_errors=True)
    ready.mkdir()
    replaced = replacements(plan, spooled, where) if spooled and len(spooled.table) else None
    build = {"wds": _wds, "npy": _npy_files, "hdf5": _hdf5, "lmdb": _lmdb_file}
    merged = build[plan.index.format](plan, staged, replaced, where, ready)
    merged.field_counts = field_counts(plan, staged, replaced)
    return merged


def replacements(plan: AppendPlan, spooled: Staged, where: Path) -> Replacements:
    """The staged replacements, each with the DST sample it takes the place of."""
    index_of = {item.key: i for item, i in zip(plan.replacing, plan.replaced, strict=True)}
    return Replacements([index_of[spooled.table.key(j)] for j in range(len(spooled.table))],
                        spooled.table, spooled.exts, where / REPLACE_DIR / SPOOL,
                        len(plan.index.fields))


def joined(old: SampleTable, new: SampleTable, shift: int) -> SampleTable:
    """DST's rows, then the staged rows with their offsets moved `shift` bytes on."""
    builder = TableBuilder()
    builder.extend(old)
    rows = np.array(new.rows, copy=True)
    rows["offset"] += shift
    builder.extend(SampleTable(rows, new.keys_blob, new.fields))
    return builder.build()


def _wds(plan: AppendPlan, staged: Staged, replaced: Replacements | None, where: Path,
         ready: Path) -> Merged:
    old, shards, moves = replaced_rows(plan.table, replaced), plan.index.shards, []
    if replaced is not None:
        shards, names = rewrite_shards(plan.folder, plan.index, old, replaced, ready)
        moves = [(f"{READY}/{name}", name) for name in names]
    shards += staged.shards
    table = joined(old, staged.table, 0)
    stem = stem_of(plan.folder, shards)
    types = [*plan.index.extra.get("image_types", ()), *staged.image_types,
             *(replaced.exts if replaced is not None else ())]
    extra = index_extra(ready, stem, shards, table, sorted(set(types)))
    moves += [(shard.name, shard.name) for shard in staged.shards]
    if extra.get("wids_index"):
        moves.append((f"{READY}/{extra['wids_index']}", str(extra["wids_index"])))
    return Merged(shards, table, moves, extra)


def _npy_files(plan: AppendPlan, staged: Staged, replaced: Replacements | None, where: Path,
               ready: Path) -> Merged:
    """images.npy grows in place at the commit (`extend`): its checksum takes the old
    rows' pieces as they are and adds the staged rows' (both hashed when written), nothing
    copied or hashed again; with replacements it is a copy instead, its rows hashed whole."""
    height, width = plan.options.size or (0, 0)
    row = height * width * 3
    old, new = plan.index.num_samples, len(staged.table)
    header = _npy.npy_header((old + new, height, width, 3))
    keep = _npy.HEADER_BYTES + old * row
    table = joined(replaced_rows(plan.table, replaced), staged.table, old * row)
    with atomic_writer(ready / _npy.LABELS) as handle:
        np.save(handle, np.ascontiguousarray(table.labels, dtype=np.int64))
    _npy_fields.write_fields(ready, all_columns(plan, staged, replaced))
    moves = [(f"{READY}/{name}", name)
             for name in (_npy.LABELS, *_npy_fields.field_files(plan.index.fields))]
    if replaced is not None:
        path = ready / _npy.IMAGES
        with open(path, "wb") as out:
            at = copy_range(plan.folder / _npy.IMAGES, 0, out.fileno(), 0, keep)
            copy_range(where / _npy.IMAGES, _npy.HEADER_BYTES, out.fileno(), at, new * row)
            write_rows(out.fileno(), replaced, _npy.HEADER_BYTES, row)
            os.pwrite(out.fileno(), header, 0)
            os.fsync(out.fileno())
        rows = (old + new) * row
        shard = _npy.images_shard(old + new, header,
                                  ((rows, sha256_range(path, _npy.HEADER_BYTES, rows)),))
        return Merged((shard,), table, [(f"{READY}/{_npy.IMAGES}", _npy.IMAGES), *moves])
    pieces = [*_row_pieces(plan.folder / _npy.IMAGES, plan.index.shards[0], old * row),
              *_row_pieces(where / _npy.IMAGES, staged.shards[0], new * row)]
    shard = _npy.images_shard(old + new, header, pieces)
    extend = {"file": _npy.IMAGES, "keep": keep, "source": _npy.IMAGES,
              "start": _npy.HEADER_BYTES, "size": new * row, "header": header.hex()}
    return Merged((shard,), table, moves, extend=extend)


def _row_pieces(path: Path, shard: ShardInfo, size: int) -> list[Piece]:
    """The pieces of an images.npy's `size` bytes of rows: as its index lists them, or
    (a file indexed with one whole-file sha256) its rows hashed now, once."""
    if shard.pieces and sum(n for n, _ in shard.pieces[1:]) == size:
        return [piece for piece in shard.pieces[1:] if piece[0]]
    return [(size, sha256_range(path, _npy.HEADER_BYTES, size))] if size else []


def _new_part(plan: AppendPlan, staged: Staged) -> Merged:
    """The staged file, complete and hashed by its staging, as DST's next part (none
    when every new input was a reject)."""
    if not len(staged.table):
        return Merged(plan.index.shards, plan.table, [])
    shard = staged.shards[0]
    name = part_name(plan.index.shards[0].name, len(plan.index.shards))
    table = joined(plan.table, staged.table, 0)  # a part's offsets are its own file's
    return Merged((*plan.index.shards, dataclasses.replace(shard, name=name)), table,
                  [(shard.name, name)])


def _blob(path: Path) -> tuple[int, int, list[str]]:
    """Where an hdf5 file's image blob starts, its length, and each sample's extension."""
    with h5py.File(path, "r", locking=False) as h5:
        blob = h5["images"]
        exts = [ext.decode("ascii") if isinstance(ext, bytes) else str(ext)
                for ext in h5["exts"][:]]
        return int(blob.id.get_offset() or 0), int(blob.shape[0]), exts


def _hdf5(plan: AppendPlan, staged: Staged, replaced: Replacements | None, where: Path,
          ready: Path) -> Merged:
    if replaced is None:
        return _new_part(plan, staged)
    parts, old_exts = [], []
    for shard, first in zip(plan.index.shards, plan.index.shard_starts.tolist(), strict=False):
        blob_at, _, exts = _blob(plan.folder / shard.name)
        parts.append((plan.folder / shard.name, blob_at, int(first)))
        old_exts += exts
    new_at, new_size, new_exts = _blob(where / _hdf5_writer.FILE)
    old = replaced_rows(plan.table, replaced)
    segments, offsets = blob_segments(parts, plan.table, replaced)
    old.rows["offset"] = offsets
    for j, i in enumerate(replaced.at):
        old_exts[i] = replaced.exts[j]
    old_size = sum(size for _, _, size in segments)
    table = joined(old, staged.table, old_size)
    path = ready / _hdf5_writer.FILE
    at = _hdf5_writer.build_layout(path, old_size + new_size, table, old_exts + new_exts,
                                   plan.index.fields, all_columns(plan, staged, replaced))
    if at is None:
        raise RuntimeError(f"{path}: h5py did not allocate /images")
    with open(path, "r+b") as out:
        for source, start, size in [*segments, (where / _hdf5_writer.FILE, new_at, new_size)]:
            at = copy_range(source, start, out.fileno(), at, size)
        os.fsync(out.fileno())
    return _one_file(plan, path, _hdf5_writer.FILE, table)


def _lmdb_file(plan: AppendPlan, staged: Staged, replaced: Replacements | None, where: Path,
               ready: Path) -> Merged:
    if replaced is None:
        return _new_part(plan, staged)
    path = ready / "data.mdb"
    first = plan.folder / plan.index.shards[0].name
    with open(path, "wb") as out:
        copy_range(first, 0, out.fileno(), 0, first.stat().st_size)
    adding = [plan.folder / shard.name for shard in plan.index.shards[1:]]
    adding.append(where / _lmdb_writer.FOLDER / "data.mdb")
    grown = sum(source.stat().st_size for source in adding)
    env = lmdb.open(str(path), subdir=False, lock=False, readahead=False, max_dbs=0,
                    map_size=max(_lmdb_writer.INITIAL_MAP, 2 * (path.stat().st_size + grown)))
    try:
        with env.begin(write=True) as txn:
            for source in adding:
                _put_all(txn, source)
            put_lmdb(txn, plan.table, [spec.name for spec in plan.index.fields], replaced)
        env.sync(True)
    finally:
        env.close()
    fsync_path(path)
    return _one_file(plan, path, f"{_lmdb_writer.FOLDER}/data.mdb",
                     joined(replaced_rows(plan.table, replaced), staged.table, 0))


def _one_file(plan: AppendPlan, path: Path, name: str, table: SampleTable) -> Merged:
    """The grown dataset written again as the one file `path` in ready/, `name` in DST,
    whose other parts it drops."""
    shard = ShardInfo(name, len(table), path.stat().st_size, sha256_file(path))
    return Merged((shard,), table, [(f"{READY}/{path.name}", name)],
                  remove=[s.name for s in plan.index.shards[1:]])


def _put_all(txn: Any, source: Path) -> None:
    """Every key of the LMDB file `source` (samples and field keys) into `txn`."""
    env = lmdb.open(str(source), readonly=True, lock=False, subdir=False)
    try:
        with env.begin(buffers=False) as read:
            for key, value in read.cursor():
                txn.put(key, value, overwrite=False)
    finally:
        env.close()
