"""Read the images of WebDataset shards in place: the `archive` of a shards source.

    ShardSet          items (sorted by key) whose bytes lie in several shards; reads
                      item i from its shard by offset, through one ArchiveSource per
                      shard (pread for a .tar, one forward pass for a .tgz), opened
                      lazily in the process that reads
    ShardSetBuilder   collects rows shard by shard while the webdataset scan lists
                      them, then sorts them and lays the member tables out in item order

Every fields record is stored with a leading marker byte while the scan runs, so a
sample that has no field yet still has a record (the items keep one per row), and is
laid out over the final fields when the scan ends (`FieldNames.remapper`).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt

from packer.core.record import Reject, SourceItem
from packer.errors import RejectReason, SourceError
from packer.source.items import ItemsBuilder, SourceItems
from packer.source.members import (
    ArchiveSource,
    ArchiveStat,
    Columns,
    Entry,
    member_reader,
    not_utf8,
    read_entries,
)

MARK = b"\x01"  # the scan's records start with it: never empty (see the docstring)
Remap = Callable[[bytes], bytes]


class ShardSet:
    """The reader of a shards source's items (the `Origin` protocol)."""

    whole_files = True
    pixel_size: tuple[int, int] | None = None

    def __init__(self, shards: list[ArchiveSource], shard_of: npt.NDArray[np.int32],
                 local_of: npt.NDArray[np.int64], fingerprint: str) -> None:
        self.shards = shards
        self.shard_of = shard_of
        self.local_of = local_of
        self.fingerprint = fingerprint

    @property
    def path(self) -> Path:
        return self.shards[0].path if self.shards else Path(".")

    def open(self) -> None:
        """Refuse a shard that changed since the scan (its offsets would be wrong)."""
        for shard in self.shards:
            shard.open()

    def close(self) -> None:
        for shard in self.shards:
            shard.close()

    def read(self, item: SourceItem) -> bytes:
        """The image bytes of item `item.position`; damage raises RejectReason."""
        i = item.position
        return self.shards[int(self.shard_of[i])].read_member(int(self.local_of[i]))


class ShardSetBuilder:
    """Rows of every shard, then the sorted items and their reader (`build`)."""

    def __init__(self) -> None:
        self.found = ItemsBuilder("", errors="strict")
        self.columns = Columns()
        self.shard_ids = array("i")
        self.rejects: list[Reject] = []
        self.shards: list[tuple[Path, str, ArchiveStat]] = []

    def shard(self, path: Path, kind: str, before: ArchiveStat) -> None:
        """Start a shard: the samples added next lie in it."""
        self.shards.append((path, kind, before))

    def add(self, key: str, tail: str, label: int, image: Entry, record: bytes) -> None:
        """One sample: its image member and its fields record (b"": no fields)."""
        try:
            self.found.add(key, tail, label, MARK + record)
        except UnicodeEncodeError:
            self.rejects.append(not_utf8("", tail))
            return
        self.columns.append(image)
        self.shard_ids.append(len(self.shards) - 1)

    def build(self, rejects: list[Reject], labels: npt.NDArray[np.int32],
              fields: Remap | None) -> tuple[SourceItems, ShardSet]:
        """The items in key order (a repeated key is a reject) and their reader."""
        rejects.extend(self.rejects)
        self.found.map_fields(None if fields is None else
                              (lambda record: fields(record[len(MARK):])))
        built = self.found.build(rejects)
        order = self.found.order
        shard_of = np.asarray(self.shard_ids, np.int32)[order]
        local_of = np.zeros(len(order), np.int64)
        readers = []
        for number, (path, kind, before) in enumerate(self.shards):
            rows = np.flatnonzero(shard_of == number)
            local_of[rows] = np.arange(len(rows))
            table = self.columns.table(order[rows])
            readers.append(member_reader(path, kind, before, table, "shard"))
        final = labels[built.labels]
        digest = hashlib.sha256()
        for reader in readers:
            digest.update(f"{reader.path.name}:{reader.fingerprint}\n".encode())
        digest.update(final.tobytes())
        shard_set = ShardSet(readers, shard_of, local_of, digest.hexdigest())
        items = SourceItems(built.prefix, built.keys, built.tails, final, shard_set,
                            fields=built.fields)
        return items, shard_set


def read_small_members(path: Path, kind: str, before: ArchiveStat, entries: list[Entry]
                       ) -> list[bytes]:
    """The bytes of these members of one shard (labels, fields), read during the scan."""
    found = read_entries(path, kind, before, entries)
    for data in found:
        if isinstance(data, RejectReason):
            raise SourceError(f"{path}: cannot read the shard ({data}); re-download it")
    return cast(list[bytes], found)
