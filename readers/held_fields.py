"""Fields held in memory as columns: `fields_in_memory=True` on either dataset.

The chosen fields of every sample are read once, when the dataset is built, through the
format's reader (every sample checked against its field digest there), and kept as a
few buffers per field:

    str                            the text, decoded once (one str), offsets in characters
                                   (int64, N + 1), present (bool, N)
    bytes, json, int, float        the values' byte form back to back (one bytes object),
                                   offsets (int64, N + 1), present
    floats, ints (array fields)    the numbers back to back (float32 / int64), starts
                                   (int64, N + 1), each sample's shape, present

A batch's columns are then gathered from them: an array field's numbers in one
vectorized take when every sample of the batch has a value, the byte-form fields cut
out of their buffer and decoded by `field_column`, exactly as values
read from the format are. The samples' dicts and `readers.collate`'s output are the
same as without it, bit for bit (an array field whose values are not all of one dtype
is held in byte form, and goes through the same path as a read one).

What it costs: the one read at build time (a full pass over the fields, about what one
epoch of reading them costs) and the RAM of the fields' bytes. What it saves is the
per-batch read, walk and digest check of every sample's fields, the larger part of
what fields cost a batch. The buffers are numpy arrays and bytes, built before any
worker exists: forked workers share their pages (reference counting never writes to
them) and spawned ones receive them pickled with the dataset.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import torch

from packer.core.field_arrays import ArrayValueError, decode_array
from packer.core.fields import FieldSpec, numbered
from packer.errors import CorruptDatasetError
from packer.formats.base import RecordReader
from readers.batching._number_arrays import NumberArrays, pad_layout, stored_arrays
from readers.batching.fields_collate import Column
from readers.fields import field_column

BLOCK = 4096  # samples whose fields one read takes while the columns are built
ARRAY_DTYPES: dict[str, np.dtype[Any]] = {"floats": np.dtype(np.float32),
                                         "ints": np.dtype(np.int64)}

__all__ = ["HeldFields"]


@dataclass(frozen=True)
class HeldSpans:
    """A field as its values back to back in one buffer: value i is buffer[offsets[i]:
    offsets[i + 1]] where present[i]. A str field's buffer is its text, decoded once
    (offsets in characters: a slice a sample, no decode); any other field's is the
    values' byte form, decoded by field_column as values read from the format are."""

    spec: FieldSpec
    buffer: str | bytes
    offsets: npt.NDArray[np.int64]
    present: npt.NDArray[np.bool_]

    def column(self, wanted: npt.NDArray[np.intp]) -> Column:
        buffer = self.buffer
        cells: list[Any] = [buffer[start:stop] if present else None for start, stop, present
                            in _spans(self.offsets, self.present, wanted)]
        return cells if isinstance(buffer, str) else field_column(self.spec, cells)


def _spans(offsets: npt.NDArray[np.int64], present: npt.NDArray[np.bool_],
           wanted: npt.NDArray[np.intp]) -> Iterator[tuple[int, int, bool]]:
    """(start, stop, present) of the samples `wanted`, looked up at once."""
    return zip(offsets[wanted].tolist(), offsets[wanted + 1].tolist(),
               present[wanted].tolist(), strict=True)


@dataclass(frozen=True)
class HeldArrays:
    """An array field as its numbers back to back: sample i's are numbers[starts[i]:
    starts[i + 1]], of shape shapes[i], where present[i]."""

    spec: FieldSpec
    numbers: npt.NDArray[np.generic]
    starts: npt.NDArray[np.int64]
    shapes: tuple[tuple[int, ...], ...]
    present: npt.NDArray[np.bool_]
    rest: tuple[int, ...] | None  # the trailing shape of every array with numbers, if one

    def column(self, wanted: npt.NDArray[np.intp]) -> Column:
        first, after, present = self.starts[wanted], self.starts[wanted + 1], self.present[wanted]
        if not present.all():  # as field_column: a tensor each, None for none
            return [torch.from_numpy(self.numbers[start:stop].reshape(self.shapes[i]).copy())
                    if there else None for i, start, stop, there in
                    zip(wanted.tolist(), first.tolist(), after.tolist(), present.tolist(),
                        strict=True)]
        counts = after - first
        starts = np.zeros(len(wanted) + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        taken = np.repeat(first - starts[:-1], counts) + np.arange(starts[-1])
        # With one trailing shape, a sample's rows (as collate pads it: 0 without
        # numbers) are its count of numbers over that shape's size: no lookup of the
        # shapes of random samples (a cache miss each), which padding then needs no more
        # of. Without one, collate pads from the shapes, and no rows are needed.
        rows = None if self.rest is None else counts // math.prod(self.rest)
        return NumberArrays(self.numbers[taken], starts, _Shapes(self.shapes, wanted),
                            (self.numbers.dtype.kind == "f",) * len(wanted), rows, self.rest)


class _Shapes(Sequence[tuple[int, ...]]):
    """The shapes of a batch's samples, looked up in the field's when asked for (a
    sample's dict, or padding without one trailing shape)."""

    def __init__(self, every: tuple[tuple[int, ...], ...], wanted: npt.NDArray[np.intp]) -> None:
        self.every, self.wanted = every, wanted

    def __len__(self) -> int:
        return len(self.wanted)

    @overload
    def __getitem__(self, b: int) -> tuple[int, ...]: ...

    @overload
    def __getitem__(self, b: slice) -> Sequence[tuple[int, ...]]: ...

    def __getitem__(self, b: int | slice) -> tuple[int, ...] | Sequence[tuple[int, ...]]:
        if isinstance(b, slice):
            return [self.every[i] for i in self.wanted[b].tolist()]
        return self.every[int(self.wanted[b])]


Held = HeldSpans | HeldArrays


class HeldFields:
    """The chosen fields of a whole dataset as columns (module docstring): what
    `columns` gathers a batch's fields from, in place of the format's reader."""

    def __init__(self, held: dict[str, Held],
                 damaged: dict[int, CorruptDatasetError] | None = None) -> None:
        self.held = held
        self.damaged = damaged or {}  # samples whose fields failed their digest (tolerated)

    @classmethod
    def read(cls, reader: RecordReader, specs: tuple[FieldSpec, ...], names: tuple[str, ...],
             count: int, tolerate: bool = False) -> HeldFields:
        """Fields `names` of samples 0..count-1, read from `reader` a block at a time,
        each sample checked against its digest (field_values_many). `tolerate`
        (on_error="skip"): a sample whose fields are damaged holds no values and is listed
        in `damaged`, so that a read skips it as it skips a damaged image."""
        chosen = numbered(specs, names)
        builders = {spec.name: _Builder(spec) for _, spec in chosen}
        damaged: dict[int, CorruptDatasetError] = {}
        for start in range(0, count, BLOCK):
            block = list(range(start, min(start + BLOCK, count)))
            values = _checked_values(reader, block, len(specs), damaged if tolerate else None)
            for number, spec in chosen:
                builders[spec.name].add([sample[number] for sample in values])
        return cls({name: builder.build() for name, builder in builders.items()}, damaged)

    @property
    def nbytes(self) -> int:
        """The RAM the columns take."""
        return sum(_size(held) for held in self.held.values())

    def columns(self, positions: Sequence[int], names: tuple[str, ...]) -> dict[str, Column]:
        wanted = np.asarray(positions, dtype=np.intp)
        return {name: self.held[name].column(wanted) for name in names}


def _checked_values(reader: RecordReader, block: list[int], width: int,
                    damaged: dict[int, CorruptDatasetError] | None
                    ) -> Sequence[Sequence[bytes | None]]:
    """The field values of the samples `block`; with `damaged`, a sample whose fields fail
    their digest gets no values and its error goes there (else the error is raised)."""
    try:
        return reader.field_values_many(block)
    except CorruptDatasetError:
        if damaged is None:
            raise
    values: list[Sequence[bytes | None]] = []
    for i in block:
        try:
            values.append(reader.field_values_many([i])[0])
        except CorruptDatasetError as exc:
            damaged[i] = exc
            values.append([None] * width)
    return values


def _size(held: Held) -> int:
    if isinstance(held, HeldSpans):
        return sys.getsizeof(held.buffer) + held.offsets.nbytes + held.present.nbytes
    return held.numbers.nbytes + held.starts.nbytes + held.present.nbytes


class _Builder:
    """One field's columns, grown a block of cells at a time: the byte form always, and
    the numbers of an array field while every value parses as the field's dtype."""

    def __init__(self, spec: FieldSpec) -> None:
        self.spec = spec
        self.pieces: list[bytes] = []
        self.lengths = array("q")
        self.present = bytearray()
        self.dtype: np.dtype[Any] | None = ARRAY_DTYPES.get(spec.type)
        self.numbers: list[npt.NDArray[Any]] = []
        self.counts = array("q")
        self.shapes: list[tuple[int, ...]] = []
        self.texts: list[str] | None = [] if spec.type == "str" else None
        self.characters = array("q")

    def add(self, cells: Sequence[bytes | None]) -> None:
        self.pieces.append(b"".join([cell or b"" for cell in cells]))
        self.lengths.extend([0 if cell is None else len(cell) for cell in cells])
        self.present.extend([cell is not None for cell in cells])
        if self.dtype is not None and not self._add_arrays(cells):
            self.dtype = None  # held in byte form: the read path's values, errors included
        if self.texts is not None:
            decoded = _decoded(cells)
            if decoded is None:
                self.texts = None  # held as bytes: decoded, and refused, per batch
            else:
                self.texts.append("".join(decoded))
                self.characters.extend([len(text) for text in decoded])

    def _add_arrays(self, cells: Sequence[bytes | None]) -> bool:
        arrays = stored_arrays(cells)
        if arrays is not None:
            if arrays.flat.dtype != self.dtype:
                return False
            self.numbers.append(arrays.flat)
            self.counts.extend(np.diff(arrays.starts).tolist())
            self.shapes.extend(arrays.shapes)
            return True
        for cell in cells:  # one missing, or another layout: value by value
            try:
                one = None if cell is None else decode_array(cell)
            except ArrayValueError:
                return False
            if one is not None and one.dtype != self.dtype:
                return False
            self.numbers.append(np.zeros(0, self.dtype) if one is None else one.ravel())
            self.counts.append(0 if one is None else one.size)
            self.shapes.append((0,) if one is None else one.shape)
        return True

    def build(self) -> Held:
        present = np.frombuffer(bytes(self.present), np.bool_).copy()
        if self.dtype is not None:
            shapes = tuple(self.shapes)
            return HeldArrays(self.spec, _joined(self.numbers, self.dtype), _bounds(self.counts),
                              shapes, present, pad_layout(shapes)[1])
        if self.texts is not None:
            return HeldSpans(self.spec, "".join(self.texts), _bounds(self.characters), present)
        return HeldSpans(self.spec, b"".join(self.pieces), _bounds(self.lengths), present)


def _decoded(cells: Sequence[bytes | None]) -> list[str] | None:
    """Each value as text ("" for none), as field_column decodes it; None if one is
    not UTF-8."""
    try:
        return ["" if cell is None else str(cell, "utf-8", "surrogatepass") for cell in cells]
    except UnicodeDecodeError:
        return None


def _bounds(sizes: array[int]) -> npt.NDArray[np.int64]:
    bounds = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(np.frombuffer(sizes, np.int64), out=bounds[1:])
    return bounds


def _joined(parts: list[npt.NDArray[Any]], dtype: np.dtype[Any]) -> npt.NDArray[np.generic]:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
