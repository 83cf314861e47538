"""LMDB: one environment `data.lmdb/`, one key per sample, readable by py-lmdb.

    data.lmdb/data.mdb
      key   = the sample key, UTF-8 (sorted, so a cursor walks samples in index order)
      value = [8 B label, int64 little-endian][8 B extension, ASCII, NUL-padded][image bytes]
      key   = <sample key> NUL <field name>, one per field value (datasets with fields)
      value = the field's byte form (UTF-8 text, decimal int, repr float, compact JSON,
              raw bytes); no key where the sample has no value

A field key sorts right after its sample's key (NUL is the smallest byte, and keys
hold none), so the writer puts every key in with one append-only pass. A key per field
lets stock py-lmdb read one field (`txn.get(key + b"\0caption")`) at the cost of one
value holding them all; either is small beside decoding the image. LMDB is one file,
so resume redoes it from the start.

`pack append` adds the new samples as one more LMDB file beside it,
`data.lmdb/data-00001.mdb` and so on (stock py-lmdb opens one with
`lmdb.open(path, subdir=False, readonly=True, lock=False)`): growing data.mdb in place
would change pages all over the file, so its digest would have to be computed again
from every byte, and lock-free readers of the old file could see freed pages reused.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from packer.core.index import Index, SampleTable, load_table
from packer.errors import CorruptDatasetError
from packer.formats._lmdb_writer import FIELD_SEPARATOR, FOLDER, HEADER, LmdbWriter, field_key
from packer.formats._parts import read_by_part
from packer.formats.base import (
    DecodedFields,
    checked,
    checked_values,
    no_files,
    nothing_to_check,
)

NAME = "lmdb"
FILES = (FOLDER,)
# Capabilities, declared here so that no caller branches on the format name:
THREAD_SAFE_READER = True  # one reader may serve every thread
OPENS_EVERY_SHARD = True  # its reader opens every data file at once
STORES_PIXELS = False  # raw pixels of one size, not encoded images
GROUPS_INPUTS = False  # --shard-samples: a shard per N inputs
LABELS_FILE: str | None = None  # labels beside the data, or in it
open_writer = LmdbWriter  # the format's writer, opened on a WriterPlan


class LmdbReader(DecodedFields):
    """Read-only, lock-free, no readahead: right for random access from many workers.

    Values are buffers into LMDB's map whose length is checked against the table before
    a byte is copied: a damaged page that claims a huge value fails as a
    CorruptDatasetError instead of reading past the end of the file (SIGBUS). LMDB
    itself does not check its pages, so some damage can still crash a reader; `pack
    verify` hashes the file before opening it and never does.
    """

    memory_mapped = True  # the page cache is the cache: readers skip their chunk cache

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.path = folder / FOLDER
        self.index = index
        self.table = table
        # one environment per part: data.mdb, then one an append
        self.files = [folder / shard.name for shard in index.shards] or [self.path / "data.mdb"]
        self.envs: list[Any] = []
        try:
            for path in self.files:
                self.envs.append(_open_part(path))
        except CorruptDatasetError:
            self.close()
            raise
        self.data = self.files[0]
        self.pid = os.getpid()

    def _get(self, txn: Any, i: int, key: bytes, size: int, where: Path) -> bytes:
        """Sample i, stored under `key` (its UTF-8 key) with `size` bytes, checked."""
        value = txn.get(key)
        if value is None:
            raise CorruptDatasetError(f"{where}: sample {i} ({self.table.key(i)!r}) is "
                                      "missing; reconvert")
        if len(value) != HEADER.size + size:
            raise CorruptDatasetError(
                f"{where}: sample {i} ({self.table.key(i)!r}) holds "
                f"{len(value) - HEADER.size} bytes, the index says {size}; the file is "
                "damaged, restore it or reconvert"
            )
        return checked(self.table, i, bytes(value[HEADER.size :]), where)

    def read(self, i: int) -> bytes:
        return self.read_many([i])[0]

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        """One read transaction a part; the keys and sizes of the batch looked up at once."""
        return read_by_part(self.index, indices, self._read_part)

    def _read_part(self, part: int, indices: Sequence[int]) -> list[bytes]:
        keys = self.table.key_bytes_many(indices)
        sizes = self.table.sizes[np.asarray(indices, dtype=np.intp)].tolist()
        where = self.files[part]
        try:
            with self.envs[part].begin(buffers=True) as txn:
                return [self._get(txn, i, key, size, where)
                        for i, key, size in zip(indices, keys, sizes, strict=True)]
        except lmdb.Error as exc:
            raise CorruptDatasetError(f"{where}: damaged ({exc}); restore it or "
                                      "reconvert") from exc

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        yield from self.read_many(range(start, stop))

    def field_values_many(self, indices: Sequence[int]) -> Sequence[Sequence[bytes | None]]:
        """One read transaction a part, every sample checked."""
        if self.table.fields is None:
            return [[] for _ in indices]
        batch = read_by_part(self.index, indices, self._values_part)
        return checked_values(self.index, self.table, indices, batch,
                              lambda i: self.files[self.index.shard_of(i)])

    def _values_part(self, part: int, indices: Sequence[int]
                     ) -> list[tuple[bytes | None, ...]]:
        suffixes = [field_key(b"", spec.name) for spec in self.index.fields]
        if not suffixes:
            return [() for _ in indices]
        try:
            with self.envs[part].begin() as txn:
                get = txn.get
                flat = [get(key + suffix) for key in self.table.key_bytes_many(indices)
                        for suffix in suffixes]
        except lmdb.Error as exc:
            raise CorruptDatasetError(f"{self.files[part]}: damaged ({exc}); restore it or "
                                      "reconvert") from exc
        return list(zip(*[iter(flat)] * len(suffixes), strict=True))  # a tuple a sample

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def _open_part(path: Path) -> Any:
    """A read-only, lock-free environment on one data file, checked not to be shorter
    than its pages (LMDB would read past the end: SIGBUS)."""
    if not path.is_file():
        raise CorruptDatasetError(f"{path}: missing; reconvert")
    try:
        env = lmdb.open(str(path), readonly=True, lock=False, readahead=False, subdir=False,
                        max_readers=512)
    except lmdb.Error as exc:
        raise CorruptDatasetError(f"{path}: not a readable LMDB file ({exc}); "
                                  "restore it or reconvert") from exc
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    if path.stat().st_size < need:
        env.close()
        raise CorruptDatasetError(f"{path}: truncated ({path.stat().st_size} "
                                  f"bytes, its pages need {need}); restore or reconvert")
    return env


open_reader = LmdbReader


def read_labels(folder: Path, index: Index) -> np.ndarray:
    """Labels from the value headers: in key order (which is sample order) for a
    conversion; each sample looked up by its key in its part once appended to (appended
    samples follow the old ones, so sample order is not key order)."""
    if not index.extra.get("appended"):
        return _labels_in_key_order(folder / FOLDER / "data.mdb")
    table = load_table(folder)
    reader = LmdbReader(folder, index, table)
    try:
        return np.asarray(read_by_part(index, range(index.num_samples),
                                       lambda part, indices: _labels_of(reader, part, indices)),
                          np.int64)
    finally:
        reader.close()


def _labels_of(reader: LmdbReader, part: int, indices: Sequence[int]) -> list[int]:
    try:
        with reader.envs[part].begin() as txn:
            return [-1 if (value := txn.get(key)) is None else HEADER.unpack_from(value)[0]
                    for key in reader.table.key_bytes_many(indices)]  # -1: no such class
    except (lmdb.Error, struct.error) as exc:
        raise CorruptDatasetError(f"{reader.files[part]}: damaged ({exc}); reconvert") from exc


def _labels_in_key_order(path: Path) -> np.ndarray:
    env = _open_part(path)
    try:
        with env.begin() as txn:
            return np.asarray([HEADER.unpack_from(value)[0] for key, value in txn.cursor()
                               if FIELD_SEPARATOR not in key], np.int64)
    except (lmdb.Error, struct.error) as exc:
        raise CorruptDatasetError(f"{path}: damaged ({exc}); reconvert") from exc
    finally:
        env.close()


side_files = no_files  # the data file holds everything a reader needs
kept_files = no_files
check_kept_files = nothing_to_check
