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

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from packer.core.index import Index, SampleTable, load_table
from packer.errors import CorruptDatasetError
from packer.formats._lmdb_writer import FIELD_SEPARATOR, FOLDER, HEADER, LmdbWriter, field_key
from packer.formats._parts import open_parts, part_files, read_by_part
from packer.formats.base import DecodedFields, checked, no_files, nothing_to_check

NAME = "lmdb"
FILES = (FOLDER,)
# Capabilities (base.FormatModule):
THREAD_SAFE_READER = True
OPENS_EVERY_SHARD = True
STORES_PIXELS = False
GROUPS_INPUTS = False
LABELS_FILE: str | None = None
open_writer = LmdbWriter


@contextmanager
def _damaged(path: Path, advice: str = "restore it or reconvert") -> Iterator[None]:
    """py-lmdb's errors (and a header too short to unpack) as the file's damage."""
    try:
        yield
    except (lmdb.Error, struct.error) as exc:
        raise CorruptDatasetError(f"{path}: damaged ({exc}); {advice}") from exc


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
        self.index = index
        self.table = table
        # one environment per part: data.mdb, then one an append
        self.files = part_files(folder, index, f"{FOLDER}/data.mdb")
        self.envs: list[Any] = open_parts(self.files, _open_part, lambda env: env.close())

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
        with _damaged(where), self.envs[part].begin(buffers=True) as txn:
            return [self._get(txn, i, key, size, where)
                    for i, key, size in zip(indices, keys, sizes, strict=True)]

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        yield from self.read_many(range(start, stop))

    def _field_values(self, indices: Sequence[int]) -> list[tuple[bytes | None, ...]]:
        """One read transaction a part."""
        return read_by_part(self.index, indices, self._values_part)

    def _field_file(self, i: int) -> Path:
        return self.files[self.index.shard_of(i)]

    def _values_part(self, part: int, indices: Sequence[int]
                     ) -> list[tuple[bytes | None, ...]]:
        suffixes = [field_key(b"", spec.name) for spec in self.index.fields]
        if not suffixes:
            return [() for _ in indices]
        with _damaged(self.files[part]), self.envs[part].begin() as txn:
            get = txn.get
            flat = [get(key + suffix) for key in self.table.key_bytes_many(indices)
                    for suffix in suffixes]
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
        path = folder / FOLDER / "data.mdb"
        env = _open_part(path)
        try:
            with _damaged(path, "reconvert"), env.begin() as txn:
                return np.asarray([HEADER.unpack_from(value)[0] for key, value in txn.cursor()
                                   if FIELD_SEPARATOR not in key], np.int64)
        finally:
            env.close()
    reader = LmdbReader(folder, index, load_table(folder))
    try:
        return np.asarray(read_by_part(index, range(index.num_samples),
                                       lambda part, indices: _labels_of(reader, part, indices)),
                          np.int64)
    finally:
        reader.close()


def _labels_of(reader: LmdbReader, part: int, indices: Sequence[int]) -> list[int]:
    with _damaged(reader.files[part], "reconvert"), reader.envs[part].begin() as txn:
        return [-1 if (value := txn.get(key)) is None else HEADER.unpack_from(value)[0]
                for key in reader.table.key_bytes_many(indices)]  # -1: no such class


side_files = no_files  # the data file holds everything a reader needs
kept_files = no_files
check_kept_files = nothing_to_check
