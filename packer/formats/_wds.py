"""WebDataset: POSIX tar shards that stock `webdataset` reads.

    <name>-00000.tar     (<name>: the dataset's name, see `shard_stem`)
      [512 B header (+ pax header for long or non-ASCII names)] <key>.<ext>
                                                        image bytes, padded to 512
      [512 B header] <key>.cls   label as decimal text, padded to 512
      [512 B header] <key>.<field>.txt ...   one member per field value (_wds_fields)
      ... next sample ...
      [1024 B of zeros]   end of archive

Member metadata is fixed (mtime 0, uid/gid 0, mode 0644), so the same input gives
byte-identical shards. Webdataset splits a member name at the first dot of its base
name, so keys are percent-encoded (`%` -> `%25`, `.` -> `%2E`): stock webdataset yields
the encoded key as `__key__`, and `urllib.parse.unquote` gives the original back.
The per-sample table records the byte offset of each image inside its shard, so the
map-style reader seeks straight to it. Beside the shards, `<name>.wids.json` indexes
them for wids.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packer.core.fields import FieldSpec
from packer.core.index import Index, SampleTable, ShardInfo
from packer.core.record import Record
from packer.errors import CorruptDatasetError
from packer.formats._tar import BLOCK, member_header, padding
from packer.formats._wds_fields import field_members
from packer.formats._wds_names import remove_strays, shard_name, stem_of
from packer.formats._wds_shards import MAX_OPEN_SHARDS as MAX_OPEN_SHARDS  # re-exported
from packer.formats._wds_shards import OpenShards, batch_values
from packer.formats._wids import check_index, index_extra, indexed_name, member_types
from packer.formats.base import DecodedFields, Location, WriterPlan, checked, no_files
from packer.storage.files import commit, partial_path
from packer.storage.filestream import ShardFile

NAME = "wds"
FILES = ("*-[0-9][0-9][0-9][0-9][0-9]*.tar",)
# Capabilities (base.FormatModule):
THREAD_SAFE_READER = False
OPENS_EVERY_SHARD = False
STORES_PIXELS = False
GROUPS_INPUTS = True
LABELS_FILE: str | None = None

END_OF_ARCHIVE = bytes(2 * BLOCK)


def encode_key(key: str) -> str:
    """Make a key safe from webdataset's split at the first dot."""
    return key.replace("%", "%25").replace(".", "%2E")


def sample_pieces(record: Record, fields: Sequence[FieldSpec]) -> tuple[list[bytes], int, int]:
    """The tar pieces of one sample (image member, .cls member, field members), where its
    image bytes start in them, and where its field members start."""
    name = encode_key(record.key)
    data = record.data
    header = member_header(f"{name}.{record.ext}", len(data))
    label = str(record.label).encode("ascii")
    rest = b"".join((padding(len(data)), member_header(f"{name}.cls", len(label)), label,
                     padding(len(label))))
    pieces = [header, data, rest]
    if fields:
        pieces += field_members(name, fields, record.fields)
    return pieces, len(header), len(header) + len(data) + len(rest)


class WdsWriter:
    """Writes tar shards, rolling at the shard limits; one shard is one resumable part.

    Each sample goes out as three pieces (header, image bytes, the rest up to the next
    sample) through a ShardFile, which hashes and writes back in threads. Shards are
    named `<stem>-NNNNN.tar` (`stem_of` the plan's folder and name); finish() adds the
    wids index and sets `index_extra`, what index.json's `extra` records about the shards.
    """

    resumable = True

    def __init__(self, plan: WriterPlan) -> None:
        self.plan = plan
        self.shards: list[ShardInfo] = list(plan.done_shards)
        self.stem = stem_of(plan.folder, plan.done_shards, plan.name)
        self.image_types: set[str] = set()  # member extensions of the images written
        self.index_extra: dict[str, Any] = {}
        remove_strays(plan.folder, plan.done_shards)
        self._file: ShardFile | None = None
        self._bytes = 0
        self._samples = 0

    def part_full(self, next_size: int) -> bool:
        if self._file is None or self._samples == 0:  # no shard open: nothing to end
            return False
        limit = self.plan.shards.max_samples
        if limit is not None and self._samples >= limit:
            return True
        # Header, padded image, .cls member, end of archive (a pax header for a long or
        # non-ASCII name comes on top): a shard stays within max_bytes unless one sample
        # alone is larger.
        need = BLOCK + next_size + (-next_size % BLOCK) + 2 * BLOCK + len(END_OF_ARCHIVE)
        need += 2 * BLOCK * len(self.plan.fields)  # a header and padding per field member
        return self._bytes + need > self.plan.shards.max_bytes

    def add(self, record: Record) -> Location:
        file = self._file or self._open()
        pieces, image_at, fields_at = sample_pieces(record, self.plan.fields)
        self.image_types.add(record.ext)
        self._samples += 1
        file.write(pieces)
        start = self._bytes
        self._bytes += sum(map(len, pieces))
        if not self.plan.fields:
            return Location(start + image_at, len(record.data))
        return Location(start + image_at, len(record.data), start + fields_at,
                        self._bytes - start - fields_at)

    def _open(self) -> ShardFile:
        self._file = ShardFile(partial_path(self._current_path()))
        self._bytes = 0
        self._samples = 0
        return self._file

    def _current_path(self) -> Path:
        return self.plan.folder / shard_name(len(self.shards), self.stem)

    def end_part(self) -> None:
        if self._file is None:
            return
        self._file.write([END_OF_ARCHIVE])
        self._bytes += len(END_OF_ARCHIVE)
        self._file.close()
        digest = self._file.hexdigest()
        self._file = None
        path = self._current_path()
        commit(partial_path(path), path)
        self.shards.append(ShardInfo(path.name, self._samples, self._bytes, digest))

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self.end_part()
        shards = tuple(self.shards)
        types = self.image_types | member_types(self.plan.folder, self.plan.done_shards)
        self.index_extra = index_extra(self.plan.folder, self.stem, shards, table,
                                       types)
        return shards

    def abort(self) -> None:
        if self._file is not None:
            self._file.abort()
            self._file = None


open_writer = WdsWriter


class WdsReader(DecodedFields):
    """Reads images from tar shards by the offsets recorded at pack time, and field
    values from the field spans (`OpenShards`: which shards stay open, the bounds
    checks, the memory maps and their SIGBUS risk)."""

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.folder = folder
        self.index = index
        self.table = table
        self._shards = OpenShards(folder, index, table)

    def read(self, i: int) -> bytes:
        shard = self.index.shard_of(i)
        offset = int(self.table.offsets[i])
        data = self._shards.pread(shard, offset, int(self.table.sizes[i]), i)
        return checked(self.table, i, data, self._shards.path(shard), offset)

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        """One large read per shard span, sliced into samples."""
        i = start
        while i < stop:
            shard = self.index.shard_of(i)
            end = min(stop, int(self.index.shard_starts[shard + 1]))
            offsets = self.table.offsets[i:end].tolist()
            sizes = self.table.sizes[i:end].tolist()
            first = offsets[0]
            block = memoryview(self._shards.pread(shard, first, offsets[-1] + sizes[-1] - first,
                                                  end - 1))
            where = self._shards.path(shard)
            for j, offset, size in zip(range(i, end), offsets, sizes, strict=True):
                data = bytes(block[offset - first : offset - first + size])
                yield checked(self.table, j, data, where, offset)
            i = end

    def _field_values(self, indices: Sequence[int]) -> list[list[bytes | None]]:
        assert self.table.fields is not None  # field_values_many asks only then
        found = np.searchsorted(self.index.shard_starts, np.asarray(indices, np.int64),
                                side="right") - 1
        offsets, sizes = self.table.fields.locations(indices)
        return batch_values(self._shards, self.index.fields, indices, found.tolist(), offsets,
                            sizes)

    def _field_file(self, i: int) -> Path:
        return self._shards.path(self.index.shard_of(i))

    def close(self, _close: Callable[[int], None] = os.close) -> None:
        """Close every shard file. `os.close` is bound here, at definition: a reader kept
        in a module-level variable is finalized at interpreter exit, when the module's
        globals (`os` among them) may already be gone."""
        self._shards.close(_close)

    def __del__(self) -> None:
        self.close()


open_reader = WdsReader


def read_labels(folder: Path, index: Index) -> np.ndarray:
    """Labels from the `.cls` members, walking the tars as stock tools do."""
    labels: list[int] = []
    for shard in index.shards:
        path = folder / shard.name
        try:
            with tarfile.open(path, "r:") as tar:
                for member in tar:
                    if member.name.endswith(".cls"):
                        handle = tar.extractfile(member)
                        labels.append(int(handle.read()) if handle else -1)
        except (tarfile.TarError, ValueError, OSError) as exc:
            raise CorruptDatasetError(f"{path}: not a valid tar ({exc}); restore or reconvert") \
                from exc
    return np.asarray(labels, dtype=np.int64)


side_files = no_files  # the shards hold everything a reader needs


def kept_files(index: Index) -> tuple[str, ...]:
    """The wids index beside the shards, where the dataset has one."""
    name = indexed_name(index)
    return () if name is None else (name,)


def check_kept_files(folder: Path, index: Index) -> tuple[str, ...]:
    """The wids index lists exactly the shards of index.json, where there is one."""
    return ("wids index",) if check_index(folder, index) else ()
