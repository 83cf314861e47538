"""The HDF5 writer: image bytes go once, straight to where HDF5 will keep them.

    data.h5.partial   [hole: HDF5 metadata, `blob_start` bytes][images ...][hole: the rest]
    data.h5.meta.partial   the same HDF5 file built by h5py at the end, blob left unwritten

The blob's size is known only at the end, but its file offset is not: h5py puts a
contiguous, early-allocated dataset created first right after the file's opening
metadata, at the same offset whatever its size. So records are written at that
offset from the start (vectored writes, writeback in a thread). At the end h5py builds
the real file with the blob allocated but never written (a sparse hole), and its
metadata before and after the blob is copied into the holes. That saves a copy of
every image (spool -> HDF5) and a re-read for the hash, which is computed while the
fsync runs. If h5py ever puts the blob elsewhere, the bytes are copied there instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from packer.core.fields import FieldSpec
from packer.core.index import SAMPLE_DTYPE, SampleTable, ShardInfo
from packer.core.record import Record
from packer.formats._field_columns import Column, columns
from packer.formats._hdf5_fields import write_fields
from packer.formats._hdf5_strings import check_strings, string_fields
from packer.formats.base import Location, WriterPlan
from packer.storage.files import commit, fsync_file, partial_path
from packer.storage.filestream import ShardFile, hash_while

FILE = "data.h5"
META_SUFFIX = ".meta.partial"
KEY_CHUNK = 16384


def _blob_dataset(h5: Any, size: int) -> Any:
    """/images: contiguous, allocated at creation, never filled (we write it ourselves)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    dcpl.set_obj_track_times(False)
    space = h5py.h5s.create_simple((size,))
    return h5py.h5d.create(h5.id, b"images", h5py.h5t.NATIVE_UINT8, space, dcpl=dcpl)


def build_layout(path: Path, size: int, table: SampleTable | None = None,
                 exts: list[str] | None = None, fields: Sequence[FieldSpec] = (),
                 built: Sequence[Column] | None = None) -> int | None:
    """Write the HDF5 file for a blob of `size` bytes (left unwritten); its offset.

    The field datasets come from `built` when given (an append's columns, old samples'
    values included), else from the table's field records."""
    with h5py.File(path, "w", track_order=False) as h5:
        offset = _blob_dataset(h5, size).get_offset()
        rows = table if table is not None else SampleTable(np.empty(0, SAMPLE_DTYPE),
                                                            np.empty(0, np.uint8))
        offsets = np.concatenate([rows.offsets, [size]]).astype(np.int64)
        h5.create_dataset("offsets", data=offsets, track_times=False)
        h5.create_dataset("labels", data=np.asarray(rows.labels, np.int64), track_times=False)
        keys = h5.create_dataset("keys", shape=(len(rows),), dtype=h5py.string_dtype("utf-8"),
                                 track_times=False)
        for start, chunk in key_chunks(rows):
            keys[start : start + len(chunk)] = chunk
        h5.create_dataset("exts", data=exts or [], dtype=h5py.string_dtype("ascii"),
                          track_times=False)
        write_fields(h5, columns(fields, rows.fields, len(rows)) if built is None else built)
    return None if offset is None else int(offset)


def key_chunks(table: SampleTable) -> Iterator[tuple[int, list[str]]]:
    """(first index, keys) in chunks: a million keys never sit in one Python list."""
    blob = bytes(table.keys_blob)
    starts = table.rows["key_start"]
    for first in range(0, len(table), KEY_CHUNK):
        bounds = starts[first : first + KEY_CHUNK + 1].tolist()
        if first + KEY_CHUNK >= len(table):
            bounds.append(len(blob))
        yield first, [blob[a:b].decode("utf-8") for a, b in pairwise(bounds)]


class Hdf5Writer:
    """Writes the blob in place during the run and the HDF5 metadata around it at the end."""

    resumable = False

    def __init__(self, plan: WriterPlan) -> None:
        self.path = plan.folder / FILE
        self.tmp = partial_path(self.path)
        self.meta = plan.folder / (FILE + META_SUFFIX)
        self.fields = plan.fields
        self._strings = string_fields(plan.fields)
        self.blob_start = build_layout(self.meta, 1) or 0
        self.meta.unlink()
        self._file = ShardFile(self.tmp, start=self.blob_start, hashed=False)
        self._exts: list[str] = []

    def part_full(self, next_size: int) -> bool:
        return False

    def add(self, record: Record) -> Location:
        if self._strings:  # checked before anything is written
            check_strings(self.fields, self._strings, record.fields)
        offset = self._file.size
        self._file.write([record.data])
        self._exts.append(record.ext)
        return Location(offset, len(record.data))

    def end_part(self) -> None:
        self._file.flush()

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self._file.flush()
        size = self._file.size
        offset = build_layout(self.meta, size, table, self._exts, self.fields)
        if offset == self.blob_start and size > 0:
            self._fill_holes(size)
            self.meta.unlink()
            digest = hash_while(self.tmp, self._file.close)
        else:
            self._file.close()
            self._move_blob(offset, size)
            digest = hash_while(self.tmp, lambda: fsync_file(self.tmp))
        commit(self.tmp, self.path)
        return (ShardInfo(FILE, len(table), self.path.stat().st_size, digest),)

    def _fill_holes(self, size: int) -> None:
        """Copy the metadata before and after the blob from the h5py-built file."""
        end = self.blob_start + size
        with open(self.meta, "rb") as meta:
            head = meta.read(self.blob_start)
            meta.seek(end)
            tail = meta.read()
        os.pwrite(self._file.fd, head, 0)
        os.pwrite(self._file.fd, tail, end)
        os.ftruncate(self._file.fd, end + len(tail))

    def _move_blob(self, offset: int | None, size: int) -> None:
        """Fallback: copy the blob to where h5py put it, and use h5py's file."""
        if size:
            if offset is None:
                raise RuntimeError(f"{self.meta}: h5py did not allocate /images")
            with open(self.tmp, "rb") as src, open(self.meta, "r+b") as dst:
                _copy_range(src.fileno(), self.blob_start, dst.fileno(), offset, size)
        os.replace(self.meta, self.tmp)

    def abort(self) -> None:
        self._file.abort()


def _copy_range(src: int, src_at: int, dst: int, dst_at: int, size: int) -> None:
    while size > 0:
        done = os.copy_file_range(src, dst, size, src_at, dst_at)
        if done <= 0:
            raise OSError(f"copy_file_range stopped with {size} bytes left")
        src_at, dst_at, size = src_at + done, dst_at + done, size - done
