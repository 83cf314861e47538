"""The LMDB writer: records buffered and written in large append-only transactions into
`data.lmdb.partial/`, renamed `data.lmdb/` when complete. When the map fills, its size
doubles and the transaction is replayed, so there is no user-visible `map_size`.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from typing import Any

import lmdb

from packer.core.fields import unpack_record
from packer.core.index import SampleTable, ShardInfo
from packer.core.record import Record
from packer.errors import CorruptDatasetError, UnstorableRecord
from packer.formats.base import Location, WriterPlan
from packer.storage.files import commit, fsync_dir, partial_path
from packer.storage.filestream import Writeback, hash_while

FOLDER = "data.lmdb"
HEADER = struct.Struct("<q8s")
TXN_BYTES = 64 << 20
INITIAL_MAP = 1 << 30
MAX_KEY_BYTES = 511
FIELD_SEPARATOR = b"\0"


def field_key(key: bytes, name: str) -> bytes:
    return key + FIELD_SEPARATOR + name.encode("ascii")


def pack_value(label: int, ext: str, data: bytes) -> bytes:
    return HEADER.pack(label, ext.encode("ascii")) + data


class LmdbWriter:
    """Buffers records and writes them in large append-only transactions."""

    resumable = False

    def __init__(self, plan: WriterPlan) -> None:
        self.folder = plan.folder / FOLDER
        self.tmp = partial_path(self.folder)
        self.fields = plan.fields
        self._longest_field = max((len(spec.name) + 1 for spec in plan.fields), default=0)
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.env: Any = lmdb.open(str(self.tmp), map_size=INITIAL_MAP, subdir=True,
                                      readahead=False, meminit=True, max_dbs=0, sync=False)
        except lmdb.Error as exc:  # py-lmdb's own errors: an OSError, as the writers raise
            raise OSError(errno.ENOSPC if isinstance(exc, lmdb.DiskError) else errno.EIO,
                          f"lmdb cannot create {self.tmp} ({exc})") from exc
        self._batch: list[tuple[bytes, bytes]] = []
        self._batch_bytes = 0
        self._count = 0
        # Start writing committed pages to disk early, so the final sync waits for little.
        self._sync_fd = os.open(self.tmp / "data.mdb", os.O_RDONLY | os.O_CLOEXEC)
        self._writeback = Writeback(self._sync_fd)

    def part_full(self, next_size: int) -> bool:
        return False

    def add(self, record: Record) -> Location:
        key = record.key.encode("utf-8")
        if len(key) + self._longest_field > MAX_KEY_BYTES:  # checked before anything is written
            raise UnstorableRecord(
                f"key too long for LMDB: {len(key) + self._longest_field} bytes, at most "
                f"{MAX_KEY_BYTES}; shorten the file path or use another format"
            )
        value = pack_value(record.label, record.ext, record.data)
        self._batch.append((key, value))
        self._batch_bytes += len(value)
        if self.fields:  # a key per value, in name order: the keys go in sorted
            values = unpack_record(record.fields, len(self.fields))
            for spec, field in sorted(zip(self.fields, values, strict=True),
                                      key=lambda pair: pair[0].name):
                if field is not None:
                    self._batch.append((field_key(key, spec.name), field))
                    self._batch_bytes += len(field)
        self._count += 1
        if self._batch_bytes >= TXN_BYTES:
            self._flush()
        return Location(-1, len(record.data))

    def _flush(self) -> None:
        while self._batch:
            try:
                with self.env.begin(write=True) as txn:
                    cursor = txn.cursor()
                    _, added = cursor.putmulti(self._batch, append=True)
                    if added != len(self._batch):
                        raise CorruptDatasetError(f"{self.tmp}: duplicate key in the batch")
                self._batch.clear()
                self._batch_bytes = 0
                self._writeback.wanted.set()
            except lmdb.MapFullError:
                self.env.set_mapsize(self.env.info()["map_size"] * 2)
            except lmdb.Error as exc:  # a failed write: word it like any other (disk full...)
                raise OSError(errno.EIO, f"{self.tmp}: {exc}") from exc

    def end_part(self) -> None:
        self._flush()

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self._flush()
        self._stop_writeback()
        digest = hash_while(self.tmp / "data.mdb", self._sync_and_close)
        (self.tmp / "lock.mdb").unlink(missing_ok=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        commit(self.tmp, self.folder)
        fsync_dir(self.folder)
        size = (self.folder / "data.mdb").stat().st_size
        return (ShardInfo(f"{FOLDER}/data.mdb", self._count, size, digest),)

    def _sync_and_close(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise OSError(errno.EIO, f"{self.tmp}: {exc}") from exc
        self.env.close()

    def _stop_writeback(self, timeout: float | None = None) -> None:
        if self._sync_fd >= 0:
            self._writeback.stop(timeout)
            fd, self._sync_fd = self._sync_fd, -1  # closed once, whatever interrupts us
            os.close(fd)

    def abort(self) -> None:
        self._stop_writeback(timeout=2.0)
        self.env.close()
