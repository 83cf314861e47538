"""npy fields: a folder `fields/` beside images.npy, one row per sample, memory-mapped.

    fields/<name>.npy            int64 | float64 (N,)    int and float fields
    fields/<name>.offsets.npy    int64 (N + 1,)          str, json, bytes, floats,
                                                           ints: value i is
    fields/<name>.data.npy       uint8 (total,)            data[offsets[i]:offsets[i+1]]
                                                           (UTF-8 text, JSON text, bytes,
                                                           .npy bytes of floats, ints)
    fields/<name>.present.npy    bool (N,)               which samples have a value

Stock numpy: `np.load("fields/score.npy")` is the scores; a caption is
`bytes(data[offsets[i]:offsets[i + 1]]).decode()`. Written at the end from the
conversion's field records (as `columns`), so a resumed run gets the fields of the parts
it kept; every file goes through a temporary name and a rename.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from packer.core.checks import load_array
from packer.core.fields import FieldSpec
from packer.errors import CorruptDatasetError
from packer.formats._field_columns import (
    Column,
    by_sample,
    offsets_and_data,
    sliced_values,
    value_bytes,
)
from packer.storage.files import atomic_writer

FOLDER = "fields"


def field_files(specs: Sequence[FieldSpec]) -> tuple[str, ...]:
    """The files of these fields, relative to the dataset folder."""
    names: list[str] = []
    for spec in specs:
        ends = (".present.npy", ".npy") if spec.type in ("int", "float") else \
            (".present.npy", ".offsets.npy", ".data.npy")
        names += [f"{FOLDER}/{spec.name}{end}" for end in ends]
    return tuple(names)


def write_fields(folder: Path, built: Sequence[Column]) -> None:
    """Write every field's files under folder/fields (nothing without fields)."""
    if not built:
        return
    (folder / FOLDER).mkdir(exist_ok=True)
    for column in built:
        base = folder / FOLDER / column.spec.name
        _save(Path(f"{base}.present.npy"), column.present)
        if column.numbers is not None:
            _save(Path(f"{base}.npy"), column.numbers)
            continue
        offsets, data = offsets_and_data(column.values or [])
        _save(Path(f"{base}.offsets.npy"), offsets)
        _save(Path(f"{base}.data.npy"), data)


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_writer(path) as handle:
        np.save(handle, np.ascontiguousarray(array))


class FieldArrays:
    """The memory-mapped field files of one npy dataset, opened on first use."""

    def __init__(self, folder: Path, specs: Sequence[FieldSpec], count: int) -> None:
        self.folder = folder / FOLDER
        self.specs = specs
        self.count = count
        self._arrays: dict[str, tuple[np.ndarray, ...]] | None = None

    def _open(self) -> dict[str, tuple[np.ndarray, ...]]:
        arrays = {}
        for spec in self.specs:
            paths = [self.folder.parent / name for name in field_files([spec])]
            # Plain ndarray views of the memmaps: indexing a memmap makes a memmap object
            # each time, which costs more than the rest of reading a value.
            arrays[spec.name] = tuple(load_array(path).view(np.ndarray) for path in paths)
            if len(arrays[spec.name][0]) != self.count:
                raise CorruptDatasetError(f"{paths[0]}: not one row per sample; reconvert")
        return arrays

    def close(self) -> None:
        """Drop the memmaps (opened again on next use)."""
        self._arrays = None

    def values_many(self, indices: Sequence[int]) -> list[list[bytes | None]]:
        """Each sample's field values in byte form (None: no value), one lookup per
        column for the whole batch."""
        if self._arrays is None:
            self._arrays = self._open()
        wanted = np.asarray(indices, dtype=np.intp)
        columns = [self._column(spec, self._arrays[spec.name], wanted) for spec in self.specs]
        return by_sample(columns, len(indices))

    @staticmethod
    def _column(spec: FieldSpec, arrays: tuple[np.ndarray, ...],
                wanted: np.ndarray) -> list[bytes | None]:
        present, *rest = arrays
        flags = present[wanted].tolist()
        if len(rest) == 1:
            numbers = rest[0][wanted].tolist()
            return [value_bytes(spec.type, number) if flag else None
                    for flag, number in zip(flags, numbers, strict=True)]
        offsets, data = rest
        return sliced_values(flags, offsets, data, wanted)
