"""HDF5: one file `data.h5` that h5py and h5dump read, no group or dataset per image.

    data.h5
      /images    uint8 (total_bytes,)  all stored images back to back, contiguous layout
      /offsets   int64 (N + 1,)        sample i is images[offsets[i]:offsets[i+1]]
      /labels    int64 (N,)
      /keys      UTF-8 strings (N,)
      /exts      ASCII strings (N,)    extension of each stored image
      attrs      class_names
      /fields/<name>, /fields_present/<name>   one dataset per field (_hdf5_fields)

The blob is contiguous (no chunking): a reader then finds its file offset once and
reads samples with plain `pread`/memmap, skipping h5py's per-call overhead, which is
what makes random access fast. The writer (in `_hdf5_writer`) puts the image bytes
where the blob will be from the start and builds the HDF5 metadata around them at the
end. Timestamps are off, so the same input gives the same bytes.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from packer.core.index import Index, SampleTable
from packer.errors import CorruptDatasetError
from packer.formats._hdf5_fields import FieldDatasets
from packer.formats._hdf5_writer import Hdf5Writer
from packer.formats.base import (
    DecodedFields,
    WriterPlan,
    checked,
    checked_values,
    no_files,
    nothing_to_check,
)

NAME = "hdf5"
FILE = "data.h5"
FILES = (FILE,)
# Capabilities, declared here so that no caller branches on the format name:
THREAD_SAFE_READER = True  # one reader may serve every thread
STORES_PIXELS = False  # raw pixels of one size, not encoded images
GROUPS_INPUTS = False  # --shard-samples: a shard per N inputs
LABELS_FILE: str | None = None  # labels beside the data, or in it

COPY_BLOCK = 64 << 20


def open_writer(plan: WriterPlan) -> Hdf5Writer:
    return Hdf5Writer(plan)


class Hdf5Reader(DecodedFields):
    """Finds the contiguous blob once with h5py, then reads it through a memmap."""

    memory_mapped = True  # the page cache is the cache (readers.ram.chunk_cache)

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.path = folder / FILE
        self.index = index
        self.table = table
        self._h5: tuple[int, Any, FieldDatasets] | None = None  # (pid, file, its fields)
        try:
            with h5py.File(self.path, "r", locking=False) as h5:
                blob = h5["images"]
                start = blob.id.get_offset()
                length = int(blob.shape[0])
        except (OSError, KeyError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
            # h5py's error for a damaged file depends on where the damage is
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
        if self._mmap is None:  # an empty file: nothing to read
            raise CorruptDatasetError(f"{self.path}: empty; restore or reconvert")
        data = self._mmap[offset : offset + int(self.table.sizes[i])]
        return checked(self.table, i, data, self.path)

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        return [self.read(i) for i in indices]

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        for i in range(start, stop):
            yield self.read(i)

    def field_values_many(self, indices: Sequence[int]) -> Sequence[Sequence[bytes | None]]:
        """Read through h5py (opened on first use in this process),
        one read per field for the batch, every sample checked."""
        if self.table.fields is None:
            return [[] for _ in indices]
        try:
            if self._h5 is None or self._h5[0] != os.getpid():
                h5 = h5py.File(self.path, "r", locking=False)
                self._h5 = (os.getpid(), h5, FieldDatasets(h5, self.index.fields))
            values = self._h5[2].values_many(indices)
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
            where = f"sample {indices[0]}" if len(indices) == 1 else "a batch of samples"
            raise CorruptDatasetError(f"{self.path}: cannot read the fields of {where} "
                                      f"({exc}); reconvert") from exc
        return checked_values(self.index, self.table, indices, values, self.path)

    def close(self) -> None:
        if self._h5 is not None and self._h5[0] == os.getpid():
            self._h5[1].close()
        self._h5 = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None


def open_reader(folder: Path, index: Index, table: SampleTable) -> Hdf5Reader:
    return Hdf5Reader(folder, index, table)


def read_labels(folder: Path, index: Index) -> np.ndarray:
    try:
        with h5py.File(folder / FILE, "r", locking=False) as h5:
            return np.asarray(h5["labels"][:], dtype=np.int64)
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise CorruptDatasetError(f"{folder / FILE}: cannot read labels ({exc}); "
                                  "reconvert") from exc


side_files = no_files  # the data file holds everything a reader needs
kept_files = no_files
check_kept_files = nothing_to_check
