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

`pack append` adds the new samples as one more such file, `data.parts/data-00001.h5`
and so on (its *parts*), each laid out as data.h5 with its own samples:
HDF5 cannot grow a contiguous dataset, and rewriting data.h5 would copy and hash the
old data again.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from packer.core.index import Index, SampleTable
from packer.errors import CorruptDatasetError
from packer.formats._hdf5_fields import FieldDatasets
from packer.formats._hdf5_writer import Hdf5Writer
from packer.formats._parts import open_parts, part_files, read_by_part
from packer.formats.base import DecodedFields, checked, no_files, nothing_to_check

NAME = "hdf5"
FILE = "data.h5"
PARTS = "data.parts"  # the files appends add (`part_name`)
FILES = (FILE, PARTS)
# Capabilities (base.FormatModule):
THREAD_SAFE_READER = True
OPENS_EVERY_SHARD = True
STORES_PIXELS = False
GROUPS_INPUTS = False
LABELS_FILE: str | None = None
open_writer = Hdf5Writer
# h5py's error for a damaged file depends on where the damage is
H5_ERRORS = (OSError, KeyError, ValueError, TypeError, RuntimeError)


class Hdf5Reader(DecodedFields):
    """Finds each part's contiguous blob once with h5py, then reads it through a memmap.

    Parts: data.h5, then one file an append each; sample i is in the part index.json's
    shards say, at its offset in that part's blob."""

    memory_mapped = True  # the page cache is the cache: readers skip their chunk cache

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.index = index
        self.table = table
        self.files = part_files(folder, index, FILE)
        self.first = index.shard_starts[:-1].tolist() if index.shards else [0]
        # per process: (pid, the open h5py files, their fields), opened on first use
        self._h5: tuple[int, list[Any], list[FieldDatasets]] | None = None
        self._maps = open_parts(self.files, _open_map, _close_map)  # (blob start, map) a part

    def read(self, i: int) -> bytes:
        part = self.index.shard_of(i) if len(self._maps) > 1 else 0
        start, data_map = self._maps[part]
        if data_map is None:  # an empty file: nothing to read
            raise CorruptDatasetError(f"{self.files[part]}: empty; restore or reconvert")
        offset = start + int(self.table.offsets[i])
        data = data_map[offset : offset + int(self.table.sizes[i])]
        return checked(self.table, i, data, self.files[part], offset)

    def _field_values(self, indices: Sequence[int]) -> list[list[bytes | None]]:
        """Read through h5py (opened on first use in this process), one read per field
        and part for the batch."""
        return read_by_part(self.index, indices, self._values_part)

    def _field_file(self, i: int) -> Path:
        return self.files[self.index.shard_of(i)]

    def _values_part(self, part: int, indices: Sequence[int]) -> list[list[bytes | None]]:
        try:
            if self._h5 is None or self._h5[0] != os.getpid():
                files = [h5py.File(path, "r", locking=False) for path in self.files]
                self._h5 = (os.getpid(), files,
                            [FieldDatasets(h5, self.index.fields) for h5 in files])
            first = self.first[part]
            return self._h5[2][part].values_many([i - first for i in indices])
        except H5_ERRORS as exc:
            where = f"sample {indices[0]}" if len(indices) == 1 else "a batch of samples"
            raise CorruptDatasetError(f"{self.files[part]}: cannot read the fields of {where} "
                                      f"({exc}); reconvert") from exc

    def close(self) -> None:
        if self._h5 is not None and self._h5[0] == os.getpid():
            for h5 in self._h5[1]:
                h5.close()
        self._h5 = None
        for part in self._maps:
            _close_map(part)
        self._maps = []


def _open_map(path: Path) -> tuple[int, mmap.mmap | None]:
    """Where a part's /images blob starts and a read-only map of the file (None when
    the file is empty), the blob checked to be contiguous and inside the file."""
    try:
        with h5py.File(path, "r", locking=False) as h5:
            blob = h5["images"]
            start = blob.id.get_offset()
            length = int(blob.shape[0])
    except (*H5_ERRORS, AttributeError) as exc:
        raise CorruptDatasetError(f"{path}: cannot open ({exc}); reconvert") from exc
    if start is None and length > 0:
        raise CorruptDatasetError(f"{path}: /images is not contiguous; reconvert")
    start = int(start or 0)
    fd = os.open(path, os.O_RDONLY)
    try:
        file_size = os.fstat(fd).st_size
        if start + length > file_size:
            raise CorruptDatasetError(f"{path}: truncated ({file_size} bytes, /images needs "
                                      f"{start + length}); restore or reconvert")
        return start, mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if file_size else None
    finally:
        os.close(fd)


def _close_map(part: tuple[int, mmap.mmap | None]) -> None:
    if part[1] is not None:
        part[1].close()


open_reader = Hdf5Reader


def read_labels(folder: Path, index: Index) -> np.ndarray:
    """Every part's /labels, in order."""
    return np.concatenate([_labels(path) for path in part_files(folder, index, FILE)]
                          ).astype(np.int64, copy=False)


def _labels(path: Path) -> np.ndarray:
    try:
        with h5py.File(path, "r", locking=False) as h5:
            return np.asarray(h5["labels"][:], dtype=np.int64)
    except H5_ERRORS as exc:
        raise CorruptDatasetError(f"{path}: cannot read labels ({exc}); reconvert") from exc


side_files = no_files  # the data file holds everything a reader needs
kept_files = no_files
check_kept_files = nothing_to_check
