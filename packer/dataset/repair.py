"""Rewrite the damaged files of a packed dataset from its source (`pack verify --repair`).

The unit is the file: a wds shard is rebuilt from the source items of its keys; a
one-file format's data file (lmdb, hdf5, npy) is rebuilt whole through its writer, as
are npy's side files (labels, fields) where they are damaged. Items are re-encoded with
the options the conversion recorded, and every rebuilt data file must match index.json's
size and sha256 byte for byte (a conversion is deterministic), so index.json itself
stays as it is and a source that changed since the conversion is refused naming the
key. Every file is rebuilt and checked beside its final name before the first one is
renamed into place (each rename atomic, the folder fsynced): a kill leaves each file
old or new, never a mix, and a refused source leaves the dataset as it was.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from packer import formats
from packer.core.checks import digest_of
from packer.core.index import Index, SampleTable, ShardInfo, open_dataset
from packer.core.record import Record
from packer.core.table import TableBuilder
from packer.errors import PackError
from packer.formats._wds import END_OF_ARCHIVE, sample_pieces
from packer.formats.base import ShardOptions, WriterPlan
from packer.storage.files import commit, file_problem, partial_path

__all__ = ["WORK_FOLDER", "RecordSource", "repair_dataset", "repair_targets"]

RecordSource = Callable[[Sequence[str]], list[Record]]
"""The encoded source records of some keys, in their order (PackError naming a key the
source lacks or cannot encode)."""

WORK_FOLDER = ".repair.partial"  # where a one-file format's files are rebuilt
Built = list[tuple[Path, Path]]  # (rebuilt file, its final path)


def repair_targets(index: Index, damaged: Sequence[dict[str, object]],
                   damaged_files: Sequence[str]) -> list[str]:
    """The files `repair_dataset` rewrites: the shards (and npy side files) that hold a
    damaged sample or are damaged themselves, in the index's order."""
    names = set(damaged_files)
    for entry in damaged:  # a `file` may name several (npy: the files of the fields)
        names.update(str(entry["file"]).split(", "))
    known = [shard.name for shard in index.shards]
    known += formats.load(index.format).side_files(index)
    return [name for name in known if name in names]


def repair_dataset(folder: Path, names: Sequence[str], records_for: RecordSource,
                   source: str) -> list[str]:
    """Rewrite the files `names` of `folder` from `records_for`; returns them."""
    index, table = open_dataset(folder)
    if index.format == "wds":
        built = _rebuilt_shards(folder, index, table, names, records_for, source)
    elif len(index.shards) == 1:
        built = _rebuilt_whole(folder, index, table, names, records_for, source)
    else:
        raise PackError(f"{folder}: --repair is not yet supported for {index.format} with "
                        f"appended parts; reconvert: pack convert SRC {folder} --to "
                        f"{index.format} --overwrite")
    for tmp, path in built:
        commit(tmp, path)
    shutil.rmtree(folder / WORK_FOLDER, ignore_errors=True)
    return [str(path.relative_to(folder)) for _, path in built]


def _rebuilt_shards(folder: Path, index: Index, table: SampleTable, names: Sequence[str],
                    records_for: RecordSource, source: str) -> Built:
    """Each wds shard of `names` rebuilt under its partial name and fsynced."""
    built: Built = []
    try:
        for number, shard in enumerate(index.shards):
            if shard.name in names:
                built.append(_rebuilt_shard(folder, index, table, number, records_for,
                                            source))
    except BaseException:
        for tmp, _ in built:
            tmp.unlink(missing_ok=True)
        raise
    return built


def _rebuilt_shard(folder: Path, index: Index, table: SampleTable, number: int,
                   records_for: RecordSource, source: str) -> tuple[Path, Path]:
    shard = index.shards[number]
    start, stop = int(index.shard_starts[number]), int(index.shard_starts[number + 1])
    records = records_for([table.key(i) for i in range(start, stop)])
    for i, record in zip(range(start, stop), records, strict=True):
        _check_record(table, i, record, source)
    path = folder / shard.name
    tmp = partial_path(path)
    with open(tmp, "wb") as handle:
        for record in records:
            handle.writelines(sample_pieces(record, index.fields)[0])
        handle.write(END_OF_ARCHIVE)
        handle.flush()
        os.fsync(handle.fileno())
    _check_file(tmp, shard, path, source)
    return tmp, path


def _rebuilt_whole(folder: Path, index: Index, table: SampleTable, names: Sequence[str],
                   records_for: RecordSource, source: str) -> Built:
    """A one-file dataset rebuilt through its format's writer in WORK_FOLDER: the data
    file (checked against index.json) and side files, where `names` lists them."""
    records = records_for(table.keys())
    for i, record in enumerate(records):
        _check_record(table, i, record, source)
    work = folder / WORK_FOLDER
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        _write_all(work, index, records)
        shard = index.shards[0]
        _check_file(work / shard.name, shard, folder / shard.name, source)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return [(work / name, folder / name) for name in names]


def _write_all(work: Path, index: Index, records: Sequence[Record]) -> None:
    """Write `records` as a complete dataset of `index`'s format into `work`."""
    plan = WriterPlan(work, len(records), index.image_size, ShardOptions(max_bytes=1 << 62),
                      fields=index.fields)
    writer = formats.load(index.format).open_writer(plan)
    rows = TableBuilder()
    try:
        for record in records:
            location = writer.add(record)
            rows.add(record.key, record.label, location.offset, location.size, record.digest)
            if index.fields:
                rows.add_fields(record.fields, location.fields_offset, location.fields_size)
        writer.finish(rows.build())
    except BaseException:
        writer.abort()
        raise


def _check_file(tmp: Path, shard: ShardInfo, path: Path, source: str) -> None:
    """The rebuilt file has the size and sha256 index.json records for `path`."""
    if tmp.stat().st_size != shard.num_bytes or \
            file_problem(tmp, shard.sha256, shard.pieces) is not None:
        tmp.unlink()
        raise PackError(f"{path}: rebuilt from {source}, it still differs from index.json "
                        "(a label or field of its samples changed in the source); reconvert")


def _check_record(table: SampleTable, i: int, record: Record, source: str) -> None:
    """The source's item for sample i encodes to the bytes and label that were packed."""
    if digest_of(record.data) != table.digest(i) or record.label != int(table.labels[i]):
        raise PackError(f"{source}: the item for key {record.key!r} differs from sample {i} "
                        "of the dataset (the source changed since the conversion); "
                        "reconvert instead of repairing")
