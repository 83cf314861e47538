"""HDF5: one file `data.h5` that h5py and h5dump read, no group or dataset per image.

    data.h5
      /images    uint8 (total_bytes,)  all stored images back to back, contiguous layout
      /offsets   int64 (N + 1,)        sample i is images[offsets[i]:offsets[i+1]]
      /labels    int64 (N,)
      /keys      UTF-8 strings (N,)
      /exts      ASCII strings (N,)    extension of each stored image
      attrs      class_names

The blob is contiguous (no chunking): a reader then finds its file offset once and
reads samples with plain `pread`/memmap, skipping h5py's per-call overhead, which is
what makes random access fast. Since the blob size is known only at the end, records
are spooled to `data.h5.blob.partial` and copied in large blocks into the HDF5 file
when it is built. Timestamps are off, so the same input gives the same bytes.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import h5py
import numpy as np

from packer.atomic import commit, fsync_file, partial_path
from packer.errors import CorruptDatasetError
from packer.formats.base import Location, WriterPlan, checked
from packer.index import Index, SampleTable, ShardInfo
from packer.record import Record
from packer.verify_hash import sha256_file

NAME = "hdf5"
FILE = "data.h5"
FILES = (FILE,)
COPY_BLOCK = 64 << 20


class Hdf5Writer:
    """Spools bytes, then writes the HDF5 file in one pass at the end."""

    resumable = False

    def __init__(self, plan: WriterPlan) -> None:
        self.path = plan.folder / FILE
        self.spool_path = plan.folder / (FILE + ".blob" + ".partial")
        self._spool: BinaryIO = open(self.spool_path, "wb", buffering=8 << 20)
        self._size = 0
        self._exts: list[str] = []

    def part_full(self, next_size: int) -> bool:
        return False

    def add(self, record: Record) -> Location:
        offset = self._size
        self._spool.write(record.data)
        self._size += len(record.data)
        self._exts.append(record.ext)
        return Location(offset, len(record.data))

    def end_part(self) -> None:
        self._spool.flush()

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self._spool.close()
        tmp = partial_path(self.path)
        offsets = np.concatenate([table.offsets, [self._size]]).astype(np.int64)
        with h5py.File(tmp, "w", track_order=False) as h5:
            self._write_blob(h5)
            h5.create_dataset("offsets", data=offsets, track_times=False)
            h5.create_dataset("labels", data=np.asarray(table.labels, np.int64),
                              track_times=False)
            h5.create_dataset("keys", data=table.keys(), dtype=h5py.string_dtype("utf-8"),
                              track_times=False)
            h5.create_dataset("exts", data=self._exts, dtype=h5py.string_dtype("ascii"),
                              track_times=False)
        fsync_file(tmp)
        commit(tmp, self.path)
        self.spool_path.unlink()
        size = self.path.stat().st_size
        return (ShardInfo(FILE, len(table), size, sha256_file(self.path)),)

    def _write_blob(self, h5: Any) -> None:
        blob = h5.create_dataset("images", shape=(self._size,), dtype=np.uint8, track_times=False)
        with open(self.spool_path, "rb", buffering=0) as spool:
            position = 0
            while block := spool.read(COPY_BLOCK):
                blob[position : position + len(block)] = np.frombuffer(block, np.uint8)
                position += len(block)

    def abort(self) -> None:
        self._spool.close()


def open_writer(plan: WriterPlan) -> Hdf5Writer:
    return Hdf5Writer(plan)


class Hdf5Reader:
    """Finds the contiguous blob once with h5py, then reads it through a memmap."""

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.path = folder / FILE
        self.table = table
        try:
            with h5py.File(self.path, "r", locking=False) as h5:
                blob = h5["images"]
                start = blob.id.get_offset()
                length = int(blob.shape[0])
        except (OSError, KeyError) as exc:
            raise CorruptDatasetError(f"{self.path}: cannot open ({exc}); reconvert") from exc
        if start is None and length > 0:
            raise CorruptDatasetError(f"{self.path}: /images is not contiguous; reconvert")
        self._open_map(int(start or 0), length)

    def _open_map(self, start: int, length: int) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            file_size = os.fstat(fd).st_size
            if start + length > file_size:
                raise CorruptDatasetError(
                    f"{self.path}: truncated ({file_size} bytes, /images needs "
                    f"{start + length}); restore or reconvert"
                )
            self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if file_size else None
        finally:
            os.close(fd)
        self._start = start

    def read(self, i: int) -> bytes:
        offset = self._start + int(self.table.offsets[i])
        assert self._mmap is not None
        data = self._mmap[offset : offset + int(self.table.sizes[i])]
        return checked(self.table, i, data, self.path)

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        return [self.read(i) for i in indices]

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        for i in range(start, stop):
            yield self.read(i)

    def close(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None


def open_reader(folder: Path, index: Index, table: SampleTable) -> Hdf5Reader:
    return Hdf5Reader(folder, index, table)


def read_labels(folder: Path, index: Index) -> np.ndarray:
    with h5py.File(folder / FILE, "r", locking=False) as h5:
        return np.asarray(h5["labels"][:], dtype=np.int64)
