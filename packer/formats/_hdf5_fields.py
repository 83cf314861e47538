"""hdf5 fields: one dataset per field, one row per sample, that h5py reads as is.

    /fields/<name>           int64 | float64 | variable-length UTF-8 string (str, and
                             json as JSON text) | variable-length uint8 (bytes)
                             | uint8 (total,), contiguous: the .npy bytes of every
                             sample's array back to back (floats, ints), as /images
    /fields_offsets/<name>   int64 (N + 1,): array i is /fields/<name>[o[i]:o[i+1]]
    /fields_present/<name>   bool: which samples have a value (others hold 0, NaN, "")

Stock h5py: `h5["fields/score"][:]` is a float64 array, `h5["fields/caption"].asstr()[i]`
a str, `json.loads(h5["fields/meta"][i])` a json field, and with `o =
h5["fields_offsets/boxes"]`, `np.load(io.BytesIO(h5["fields/boxes"][o[i]:o[i + 1]]))`
an array field. Arrays are a blob for the reason images are: a reader finds its file
offset once and slices a memmap, which is faster than h5py reading a batch's
variable-length rows. Written at the end from the field records of the conversion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np
from h5py import h5s

from packer.core.fields import FieldSpec
from packer.formats._field_columns import (
    Column,
    by_sample,
    offsets_and_data,
    sliced_values,
    value_bytes,
)

GROUP = "fields"
PRESENT = "fields_present"
OFFSETS = "fields_offsets"
BLOBS = ("floats", "ints")


def write_fields(h5: Any, built: Sequence[Column]) -> None:
    """Add the field datasets (nothing for a dataset without fields)."""
    if not built:
        return
    group = h5.create_group(GROUP, track_order=False)
    present = h5.create_group(PRESENT, track_order=False)
    for column in built:
        name = column.spec.name
        present.create_dataset(name, data=column.present, track_times=False)
        if column.numbers is not None:
            group.create_dataset(name, data=column.numbers, track_times=False)
        elif column.spec.type in BLOBS:
            offsets, data = offsets_and_data(column.values or [])
            group.create_dataset(name, data=data, track_times=False)
            h5.require_group(OFFSETS).create_dataset(name, data=offsets, track_times=False)
        elif column.spec.type == "bytes":
            data = np.empty(len(column.present), dtype=object)
            for i, value in enumerate(column.values or ()):
                data[i] = np.frombuffer(value, np.uint8)
            group.create_dataset(name, data=data, dtype=h5py.vlen_dtype(np.uint8),
                                 track_times=False)
        else:
            group.create_dataset(name, data=np.array(column.values, dtype=object),
                                 dtype=h5py.string_dtype("utf-8"), track_times=False)


class FieldDatasets:
    """The field datasets of an open file: presence flags and numbers read once into
    numpy (a byte or 8 a sample), variable-length values read a batch at a time.

    Looking datasets up by name and reading one element at a time is slow in h5py, and
    the cost grows with every field: the datasets are looked up once, and a batch's
    variable-length rows come from one read per field, the rows selected as points.
    """

    def __init__(self, h5: Any, specs: Sequence[FieldSpec]) -> None:
        self.specs = specs
        self.present = [np.asarray(h5[PRESENT][spec.name][:], dtype=np.bool_) for spec in specs]
        self.columns = [_opened(h5, spec) for spec in specs]

    def values_many(self, indices: Sequence[int]) -> list[list[bytes | None]]:
        """Each sample's field values in byte form (None: no value)."""
        wanted = np.asarray(indices, dtype=np.intp)
        rows = np.unique(wanted)
        columns = [self._column(spec, present, column, wanted, rows)
                   for spec, present, column in zip(self.specs, self.present, self.columns,
                                                    strict=True)]
        return by_sample(columns, len(indices))

    @staticmethod
    def _column(spec: FieldSpec, present: np.ndarray, column: Any, wanted: np.ndarray,
                rows: np.ndarray) -> list[bytes | None]:
        flags = present[wanted].tolist()
        if isinstance(column, Blob):
            return column.values(flags, wanted)
        if isinstance(column, np.ndarray):
            stored = column[wanted].tolist()
        else:
            stored = _rows(column, rows)[np.searchsorted(rows, wanted)].tolist()
        # h5py reads UTF-8 strings as bytes, which are their byte form already
        return [None if not flag else value if type(value) is bytes
                else value_bytes(spec.type, value)
                for flag, value in zip(flags, stored, strict=True)]


class Blob:
    """An array field's bytes, memory-mapped from where the file holds them, and
    their offsets (read into memory, 8 bytes a sample)."""

    def __init__(self, h5: Any, name: str) -> None:
        self.offsets = np.asarray(h5[OFFSETS][name][:], dtype=np.int64)
        data = h5[GROUP][name]
        start, size = data.id.get_offset(), int(data.shape[0])
        if size and start is None:
            raise ValueError(f"/{GROUP}/{name} is not contiguous")
        if int(self.offsets[-1]) != size:
            raise ValueError(f"/{OFFSETS}/{name} does not end where /{GROUP}/{name} does")
        self.data = np.memmap(h5.filename, np.uint8, "r", int(start or 0), (size,)) \
            .view(np.ndarray) if size else np.zeros(0, np.uint8)

    def values(self, flags: list[bool], wanted: np.ndarray) -> list[bytes | None]:
        return sliced_values(flags, self.offsets, self.data, wanted)


def _opened(h5: Any, spec: FieldSpec) -> Any:
    """How a field's values are read: numbers into memory, arrays as a Blob, the other
    variable-length values through h5py."""
    if spec.type in ("int", "float"):
        return np.asarray(h5[GROUP][spec.name][:])
    return Blob(h5, spec.name) if spec.type in BLOBS else h5[GROUP][spec.name]


def _rows(column: Any, rows: np.ndarray) -> np.ndarray:
    """Rows (sorted, distinct) of a variable-length dataset, selected as points: a
    fraction of what h5py's fancy indexing (a union of one-row slabs) costs."""
    out = np.empty(len(rows), dtype=column.dtype)
    if len(rows):
        space = column.id.get_space()
        space.select_elements(rows.reshape(-1, 1).astype(np.uint64))
        column.id.read(h5s.create_simple((len(rows),)), space, out)
    return out
