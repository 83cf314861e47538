"""Read the images of WebDataset shards in place: the `archive` of a shards source.

    ShardSet          items (sorted by key) whose bytes lie in several shards; reads
                      item i from its shard by offset, through one ArchiveSource per
                      shard (pread for a .tar, one forward pass for a .tgz), opened
                      lazily in the process that reads
    ShardSet.builder  collects rows shard by shard while the webdataset scan lists
                      them, then sorts them and lays the member tables out in item order

Every fields record is stored with a leading marker byte while the scan runs, so a
sample that has no field yet still has a record (the items keep one per row), and is
laid out over the final fields when the scan ends (`FieldNames.remapper`).
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core.record import Reject, SourceItem
from packer.errors import RejectReason, SourceError
from packer.source.archive import stat_archive
from packer.source.gzcursor import GzipCursor
from packer.source.items import ItemsBuilder, SourceItems
from packer.source.members import ArchiveSource, ArchiveStat, Columns, Entry, MemberTable

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

    @staticmethod
    def builder(prefix: str) -> ShardSetBuilder:
        return ShardSetBuilder(prefix)

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

    def __getstate__(self) -> dict[str, Any]:
        return {"shards": self.shards, "shard_of": self.shard_of, "local_of": self.local_of,
                "fingerprint": self.fingerprint}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]


class ShardAdder:
    """Adds the samples of one shard to the builder."""

    def __init__(self, owner: ShardSetBuilder, number: int) -> None:
        self.owner = owner
        self.number = number

    def add(self, key: str, tail: str, label: int, image: Entry, record: bytes) -> None:
        """One sample: its image member and its fields record (b"": no fields)."""
        owner = self.owner
        try:
            owner.found.add(key, tail, label, MARK + record)
        except UnicodeEncodeError:
            printable = tail.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            owner.rejects.append(Reject(-1, owner.prefix + printable,
                                        "member name is not valid UTF-8; rename it"))
            return
        owner.columns.append(image)
        owner.shard_ids.append(self.number)


class ShardSetBuilder:
    """Rows of every shard, then the sorted items and their reader (`build`)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.found = ItemsBuilder(prefix, errors="strict")
        self.columns = Columns()
        self.shard_ids = array("i")
        self.rejects: list[Reject] = []
        self.shards: list[tuple[Path, str, ArchiveStat]] = []

    def shard(self, path: Path, kind: str, before: ArchiveStat) -> ShardAdder:
        self.shards.append((path, kind, before))
        return ShardAdder(self, len(self.shards) - 1)

    def build(self, rejects: list[Reject], labels: npt.NDArray[np.int32],
              fields: Remap | None) -> tuple[SourceItems, ShardSet]:
        """The items in key order (a repeated key is a reject) and their reader."""
        rejects.extend(self.rejects)
        self.found.map_fields(None if fields is None else
                              (lambda record: fields(record[len(MARK):])))
        built = self.found.build(rejects)
        order = self.found.order
        table = self.columns.table(order)
        shard_of = np.asarray(self.shard_ids, np.int32)[order]
        local_of = np.zeros(len(order), np.int64)
        readers = []
        for number, (path, kind, before) in enumerate(self.shards):
            rows = np.flatnonzero(shard_of == number)
            local_of[rows] = np.arange(len(rows))
            sub = MemberTable(table.offsets[rows], table.sizes[rows], table.methods[rows],
                              table.crcs[rows])
            readers.append(member_reader(path, kind, before, sub))
        final = labels[built.labels]
        digest = hashlib.sha256()
        for reader in readers:
            digest.update(f"{reader.path.name}:{reader.fingerprint}\n".encode())
        digest.update(final.tobytes())
        shard_set = ShardSet(readers, shard_of, local_of, digest.hexdigest())
        items = SourceItems(built.prefix, built.keys, built.tails, final, shard_set,
                            fields=built.fields)
        return items, shard_set


def read_small_members(path: Path, kind: str, entries: list[Entry]) -> list[bytes]:
    """The bytes of these members of one shard (labels, fields), read during the scan."""
    if all(len(entry.head) == entry.size for entry in entries):
        return [entry.head for entry in entries]  # the listing read them (tarheaders)
    if kind != "tgz":
        return _pread_members(path, entries)
    offsets = np.array([entry.offset for entry in entries], np.int64)
    sizes = np.array([entry.size for entry in entries], np.int64)
    try:  # a .tgz: one forward pass
        cursor = GzipCursor(path, offsets, sizes)
        try:
            found = {i: cursor.read(i) for i in np.argsort(offsets, kind="stable").tolist()}
        finally:
            cursor.close()
        return [found[i] for i in range(len(entries))]
    except (OSError, RejectReason) as exc:
        raise SourceError(f"{path}: cannot read the shard ({exc}); re-download it") from exc


def _pread_members(path: Path, entries: list[Entry]) -> list[bytes]:
    """Members of a plain tar: those the listing handed out, the others read by offset."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return [entry.head if len(entry.head) == entry.size else
                    os.pread(fd, entry.size, entry.offset) for entry in entries]
        finally:
            os.close(fd)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read the shard ({exc.strerror or exc}); "
                          "re-download it") from exc


def member_reader(path: Path, kind: str, before: ArchiveStat, table: MemberTable
                  ) -> ArchiveSource:
    """The reader of one shard's members (an `ArchiveSource`), its fingerprint the
    shard's size, mtime and member table."""
    if stat_archive(path) != before:
        raise SourceError(f"{path}: the shard changed while it was scanned; convert again")
    digest = hashlib.sha256(f"{before.size}:{before.mtime_ns}\n".encode())
    table.digest_into(digest.update)
    return ArchiveSource(path, kind, table, digest.hexdigest(), before)
