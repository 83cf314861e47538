"""NPY: decoded, resized pixels that `np.load(path, mmap_mode="r")` opens; no decode at train time.

    images.npy   [128 B npy v1.0 header: |u1, shape (N, H, W, 3)][N * H * W * 3 bytes, C order]
    labels.npy   int64 (N,)
    fields/      with fields: one or more .npy files per field (_npy_fields)

Records (raw RGB, all the same size) are appended after a reserved 128-byte header;
the header is written when the count is final, so rejected inputs leave no holes.
A part ends every PART_SAMPLES samples with an fsync: resume truncates the file to the
last durable part and continues, giving the same bytes as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from packer.core.checks import digest_of, load_array
from packer.core.index import Index, SampleTable, ShardInfo
from packer.core.record import Record
from packer.errors import CorruptDatasetError
from packer.formats._field_columns import columns
from packer.formats._npy_fields import FOLDER as FIELDS_FOLDER
from packer.formats._npy_fields import FieldArrays, field_files, write_fields
from packer.formats.base import (
    DecodedFields,
    Location,
    WriterPlan,
    checked,
    no_files,
    nothing_to_check,
)
from packer.storage.files import (
    Piece,
    atomic_writer,
    commit,
    partial_path,
    pieces_digest,
    sha256_range,
)
from packer.storage.filestream import StreamHash

NAME = "npy"
IMAGES = "images.npy"
LABELS = "labels.npy"
FILES = (IMAGES, LABELS, FIELDS_FOLDER)
# Capabilities (base.FormatModule):
THREAD_SAFE_READER = True
OPENS_EVERY_SHARD = True
STORES_PIXELS = True
GROUPS_INPUTS = False
LABELS_FILE: str | None = LABELS

HEADER_BYTES = 128
PART_SAMPLES = 2048


def npy_header(shape: tuple[int, ...]) -> bytes:
    """A version 1.0 header for a C-ordered uint8 array, padded to HEADER_BYTES."""
    text = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape!r}, }}"
    body = text.ljust(HEADER_BYTES - 10 - 1) + "\n"
    header = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")
    if len(header) != HEADER_BYTES:
        raise ValueError(f"shape {shape} does not fit a {HEADER_BYTES}-byte npy header")
    return header


class NpyWriter:
    """Appends fixed-size pixel records; resumable every PART_SAMPLES samples."""

    resumable = True

    def __init__(self, plan: WriterPlan) -> None:
        if plan.image_size is None:
            raise ValueError("npy needs a fixed image size")
        self.height, self.width = plan.image_size
        self.sample_bytes = self.height * self.width * 3
        self.folder = plan.folder
        self.fields = plan.fields
        self.tmp = partial_path(plan.folder / IMAGES)
        self.count = plan.done_samples
        self.labels = array("q")
        self._in_part = 0
        self._handle = self._open(plan.done_samples)
        self._stream = StreamHash(self._handle.fileno(), hashing=not plan.done_samples)

    def _open(self, done: int) -> BinaryIO:
        need = HEADER_BYTES + done * self.sample_bytes
        final = self.folder / IMAGES
        if done and not self.tmp.exists() and final.exists():
            # The interrupted run died after finish() renamed the file, before index.json:
            # its durable parts are in there. Take it back (the header is rewritten at the end).
            os.replace(final, self.tmp)
        if done and (not self.tmp.exists() or self.tmp.stat().st_size < need):
            raise CorruptDatasetError(
                f"{self.tmp}: missing or shorter than the {done} samples the interrupted run "
                "recorded; rerun with --overwrite to start over"
            )
        handle: BinaryIO = open(self.tmp, "r+b" if done else "wb")
        handle.truncate(need)
        handle.seek(need)
        return handle

    def part_full(self, next_size: int) -> bool:
        return self._in_part >= PART_SAMPLES

    def add(self, record: Record) -> Location:
        if len(record.data) != self.sample_bytes:
            raise ValueError(f"{record.key}: {len(record.data)} pixel bytes, expected "
                             f"{self.sample_bytes}")
        self._handle.write(record.data)
        self._stream.wrote(record.data)
        self.count += 1
        self._in_part += 1
        return Location(HEADER_BYTES + (self.count - 1) * self.sample_bytes, self.sample_bytes)

    def end_part(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._in_part = 0

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        with atomic_writer(self.folder / LABELS) as handle:
            np.save(handle, np.ascontiguousarray(table.labels, dtype=np.int64))
        write_fields(self.folder, columns(self.fields, table.fields, len(table)))
        header = npy_header((self.count, self.height, self.width, 3))
        self._handle.flush()
        rows = self._stream.finish()
        os.pwrite(self._handle.fileno(), header, 0)
        os.fsync(self._handle.fileno())
        size = self.count * self.sample_bytes
        if rows is None:  # a resumed run: some rows were written before
            rows = sha256_range(self.tmp, HEADER_BYTES, size)
        self._handle.close()
        commit(self.tmp, self.folder / IMAGES)
        return (images_shard(self.count, header, ((size, rows),)),)

    def abort(self) -> None:
        self._stream.stop()
        with contextlib.suppress(OSError):  # unwritten bytes (a full disk) stay unwritten
            self._handle.close()


def images_shard(count: int, header: bytes, rows: Sequence[Piece]) -> ShardInfo:
    """images.npy's entry: its pieces are the header, then the rows of the conversion and
    of each append, so an append hashes only what it adds."""
    pieces = ((HEADER_BYTES, hashlib.sha256(header).hexdigest()), *rows)
    return ShardInfo(IMAGES, count, sum(size for size, _ in pieces), pieces_digest(pieces),
                     pieces)


open_writer = NpyWriter


class NpyReader(DecodedFields):
    """Reads pixel rows from a read-only memmap (pages shared by every worker).

    `gather` copies a batch of rows in one go; every row read either way is checked
    against its digest.
    """

    memory_mapped = True  # the page cache is the cache: readers skip their chunk cache
    gathers_rows = True  # gather: rows of one shape, straight into a batch

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.path = folder / IMAGES
        self.index = index
        self.table = table
        self._fields = FieldArrays(folder, index.fields, index.num_samples)
        self.images = load_array(self.path)
        size = index.image_size
        if self.images.dtype != np.uint8 or size is None or self.images.shape[1:] != (*size, 3):
            raise CorruptDatasetError(
                f"{self.path}: not the uint8 (N, H, W, 3) array of {size} images that "
                "index.json describes; reconvert"
            )
        if len(self.images) != index.num_samples:
            raise CorruptDatasetError(
                f"{self.path}: {len(self.images)} images, index says {index.num_samples}; "
                "reconvert"
            )

    def read(self, i: int) -> bytes:
        data: bytes = self.images[i].tobytes()
        return checked(self.table, i, data, self.path, self._row_offset(i))

    def _row_offset(self, i: int) -> int:
        """Where row i starts in images.npy (after the array's header)."""
        header: int = getattr(self.images, "offset", 0)
        return header + i * int(self.images[0].nbytes)

    def gather(self, indices: Sequence[int], out: np.ndarray) -> None:
        """Copy rows `indices` into `out` (len(indices), H, W, 3), each checked.

        Each row is hashed right after its copy, while it is still in the core's cache:
        a worker's batch buffers rotate, and hashing a whole batch after one `np.take`
        would read every row back from memory, which is slower.
        """
        wanted = np.asarray(indices, dtype=np.intp)
        if len(wanted) and not 0 <= int(wanted.min()) <= int(wanted.max()) < len(self.images):
            raise IndexError(f"{self.path}: row out of range 0..{len(self.images) - 1}")
        source = self.images.view(np.ndarray).reshape(len(self.images), -1)
        rows = out.reshape(len(wanted), -1)
        digests = []
        for row, i in zip(rows, wanted.tolist(), strict=True):
            np.copyto(row, source[i])
            digests.append(digest_of(row.data))
        # one comparison for the batch; a mismatch is then found and named row by row
        if b"".join(digests) != self.table.digests[wanted].tobytes():
            for k, i in enumerate(wanted.tolist()):
                checked(self.table, i, rows[k].data, self.path,  # raises, naming the sample
                        self._row_offset(i))

    def _field_values(self, indices: Sequence[int]) -> list[list[bytes | None]]:
        """Each column indexed once for the batch."""
        return self._fields.values_many(indices)

    def _field_file(self, i: int) -> Path:
        return self._fields.folder

    def close(self) -> None:
        self.images = np.empty((0, 0, 0, 3), np.uint8)  # drops the memmap
        self._fields.close()


open_reader = NpyReader


def side_files(index: Index) -> tuple[str, ...]:
    """Files beside the shards that a copy of the dataset needs: labels, fields."""
    return (LABELS, *field_files(index.fields))


def read_labels(folder: Path, index: Index) -> np.ndarray:
    return np.asarray(load_array(folder / LABELS, mmap=False), dtype=np.int64)


kept_files = no_files
check_kept_files = nothing_to_check
