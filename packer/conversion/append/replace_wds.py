"""`--replace` in wds: each shard holding a replaced sample is written again.

The new shard holds the same samples in the same order, under the same name, so
sample indices, shard boundaries and brace-expanded shard lists stay as they were.
Every sample that is not replaced is written from its stored bytes, label, extension and
field values through the wds writer's own member layout, which is deterministic: its
members come out byte for byte as they were, and only the offsets after a replaced
sample move. Old bytes are read through DST's reader, checked against their digests.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

from packer.conversion.append.spool import Replacements
from packer.core.fields import pack_record
from packer.core.index import Index, SampleTable, ShardInfo
from packer.core.record import Record
from packer.errors import CorruptDatasetError
from packer.formats import _wds
from packer.storage.files import fsync_path


def rewrite_shards(folder: Path, index: Index, table: SampleTable, replaced: Replacements,
                   ready: Path) -> tuple[tuple[ShardInfo, ...], list[str]]:
    """Write the shards holding replaced samples into `ready`, updating `table`'s
    offsets (and field offsets) in place; DST's shards with those swapped, and the
    names of the shards written."""
    shards = list(index.shards)
    by_index = replaced.by_index()
    affected = sorted({index.shard_of(i) for i in by_index})
    reader = _wds.open_reader(folder, index, table)
    try:
        for k in affected:
            shards[k] = _rewrite(reader, by_index, replaced, k, ready)
    finally:
        reader.close()
    return tuple(shards), [shards[k].name for k in affected]


def _rewrite(reader: _wds.WdsReader, by_index: dict[int, int], replaced: Replacements,
             k: int, ready: Path) -> ShardInfo:
    """Shard k written again into `ready`; the table the reader reads by gets its new
    offsets (each sample's after it is read)."""
    index, table = reader.index, reader.table
    start, stop = int(index.shard_starts[k]), int(index.shard_starts[k + 1])
    name = index.shards[k].name
    exts = _extensions(reader.folder / name)
    path = ready / name
    digest = hashlib.sha256()
    at = 0
    with open(path, "wb") as out:
        for i in range(start, stop):
            j = by_index.get(i)
            record = replaced.record(j) if j is not None else _old_record(reader, exts, i)
            pieces, image_at, fields_at = _wds.sample_pieces(record, index.fields)
            for piece in pieces:
                out.write(piece)
                digest.update(piece)
            size = sum(map(len, pieces))
            table.rows["offset"][i] = at + image_at
            if table.fields is not None:
                table.fields.rows["offset"][i] = at + fields_at
                table.fields.rows["size"][i] = size - fields_at
            at += size
        out.write(_wds.END_OF_ARCHIVE)
        digest.update(_wds.END_OF_ARCHIVE)
    fsync_path(path)
    return ShardInfo(name, stop - start, at + len(_wds.END_OF_ARCHIVE), digest.hexdigest())


def _old_record(reader: _wds.WdsReader, exts: dict[int, str], i: int) -> Record:
    table = reader.table
    key = table.key(i)
    ext = exts.get(int(table.offsets[i]))
    if ext is None:
        raise CorruptDatasetError(f"{reader.folder}: no image member of sample {i} ({key!r}) "
                                  "where the table says; restore the shard or reconvert")
    fields = pack_record(reader.field_values_many([i])[0]) if reader.index.fields else b""
    return Record(i, key, int(table.labels[i]), reader.read(i), ext, table.digest(i), fields)


def _extensions(path: Path) -> dict[int, str]:
    """{offset of a member's data: the extension after its first dot} of a shard's
    members (pax headers applied by tarfile)."""
    try:
        with tarfile.open(path, "r:") as tar:
            return {member.offset_data: os.path.basename(member.name).partition(".")[2]
                    for member in tar}
    except (tarfile.TarError, OSError) as exc:
        raise CorruptDatasetError(f"{path}: not a valid tar ({exc}); restore or reconvert") \
            from exc
