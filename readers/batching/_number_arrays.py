"""A batch's number arrays in one buffer: the fast path of json number lists and of
array fields (stored_arrays, at the end).

A boxes field is stored as compact JSON text (`[[x,y,w,h],...]`).
Parsed a sample at a time (json.loads, then np.array in `natural`) it is the costly
part of a sample's fields. Here one regular expression over the batch checks
that the texts hold nothing but numbers and brackets, a few byte counts give each
text's shape (a flat list, or a rectangular list of lists), and one `np.fromstring`
reads the numbers of the whole batch, rounding decimal text exactly as float() does
(and json.loads with it). Each sample's array is then what `natural` gives it:

    a number with . e or E in the text          float32   (natural: float64 narrowed)
    only integers (exact in float64: < 2**53)   int64
    []                                          float32 of shape (0,)

Anything else in any sample of the batch (a missing value, strings, objects, NaN, a
ragged list, a larger integer, `-0`, a float beyond float32's range) returns None: the
caller then takes the per-sample path, so the values never depend on which path ran.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from packer.core.field_arrays import FLOAT32_MAX, parsed_header

_PLAIN = re.compile(rb"[0-9.,eE+\-\[\]]*")  # numbers and brackets, nothing else
_EXACT = float(2**53)  # integers below this are exact in float64
_INT64_RANGE = float(2**63)  # a JSON int this large or more: numpy makes an object array


@dataclass(frozen=True)
class NumberArrays:
    """The arrays of a batch, sample-major in one buffer (float64 parsed from JSON, the
    field's own dtype for an array field)."""

    flat: npt.NDArray[np.generic]
    starts: npt.NDArray[np.int64]  # (B + 1,): sample b's numbers are flat[starts[b]:starts[b+1]]
    shapes: Sequence[tuple[int, ...]]  # a tuple, or a view that looks them up (held fields)
    floats: tuple[bool, ...]  # float32 (True) or int64 per sample
    # Known ahead (held fields): each sample's padded length (its
    # rows, 0 without numbers) and the trailing shape all samples with numbers share.
    rows: npt.NDArray[np.int64] | None = None
    rest: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.shapes)

    def array(self, b: int) -> npt.NDArray[np.generic]:
        """Sample b's array, as natural() would give it."""
        part = self.flat[int(self.starts[b]) : int(self.starts[b + 1])]
        return part.reshape(self.shapes[b]).astype(np.float32 if self.floats[b] else np.int64)


def parse_arrays(texts: Sequence[bytes | None]) -> NumberArrays | None:
    """The arrays of every text, or None when one of them is not a plain list of numbers.

    The texts are valid JSON (the writer's json.dumps, checked against the sample's
    digest), so brackets, commas and number characters alone make a list of numbers:
    what is left to check is its shape."""
    if any(text is None for text in texts):
        return None
    present = cast(Sequence[bytes], texts)
    if _PLAIN.fullmatch(b"".join(present)) is None:  # strings, objects, NaN, true, null...
        return None
    found = [_shape(text) for text in present]
    if None in found:
        return None
    shapes = cast(list[tuple[int, ...]], found)
    floats = tuple(not shape[0] or b"." in text or b"e" in text or b"E" in text
                   for shape, text in zip(shapes, present, strict=True))
    counts = np.array([shape[0] * (shape[1] if len(shape) > 1 else 1) for shape in shapes],
                      dtype=np.int64)
    total = int(counts.sum())
    joined = b",".join(text for text in present if text != b"[]").translate(None, b"[]")
    flat = np.fromstring(joined.decode("ascii"), dtype=np.float64, sep=",") if total \
        else np.zeros(0)
    if len(flat) != total or not _exact(flat, counts, floats):
        return None
    return NumberArrays(flat, _starts(counts), tuple(shapes), floats)


def _starts(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """(B + 1,): where each sample's numbers start in the flat buffer, and the end."""
    starts = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def _exact(flat: npt.NDArray[np.float64], counts: npt.NDArray[np.int64],
           floats: tuple[bool, ...]) -> bool:
    """Whether the float64 numbers are what natural() makes of them: floats within
    float32's range (beyond it natural() decides per sample), none of them 2**63 or more
    (an integer that large makes numpy's array an object one), integers exact in float64
    and none of them the integer -0 (json.loads reads 0)."""
    if not len(flat):
        return True
    largest = float(np.fmax.reduce(np.abs(flat)))
    if largest > FLOAT32_MAX or largest >= _INT64_RANGE:
        return False  # an int beyond int64 beside floats: natural() keeps the list
    ints = flat[np.repeat(~np.array(floats, dtype=np.bool_), counts)]
    return not len(ints) or (float(np.abs(ints).max()) < _EXACT
                             and not np.signbit(ints[ints == 0]).any())


def _shape(text: bytes) -> tuple[int, ...] | None:
    """(n,) of a flat list, (rows, k) of a rectangular one, None for anything else (an
    empty row, a list of lists of other lengths, deeper nesting, numbers beside lists).

    Read off the text's skeleton, its brackets and commas with the numbers taken out,
    which few shapes share (a boxes field has one per box count): looked up, not
    parsed, for most samples."""
    if text == b"[]":
        return (0,)
    if b"[]" in text:  # an empty row: the skeleton would not tell it from one number
        return None
    return _skeleton_shape(text.translate(None, _NUMERALS))


_NUMERALS = b"0123456789.eE+-"


@functools.lru_cache(maxsize=1024)
def _skeleton_shape(skeleton: bytes) -> tuple[int, ...] | None:
    """The shape of a skeleton whose every list held at least one number."""
    if skeleton[1:2] != b"[":
        return (skeleton.count(b",") + 1,) if skeleton.count(b"[") == 1 else None
    if not skeleton.endswith(b"]]"):
        return None
    rows = skeleton[2:-2].split(b"],[")
    if skeleton.count(b"[") != len(rows) + 1 or rows.count(rows[0]) != len(rows) \
            or rows[0].strip(b",") or not skeleton.startswith(b"[["):
        return None  # a bracket that is not a row's, or rows of different lengths
    return (len(rows), len(rows[0]) + 1)


def stored_arrays(cells: Sequence[bytes | None]) -> NumberArrays | None:
    """The arrays of a batch of an array field's values (floats, ints: .npy bytes), their
    numbers joined into one buffer without a copy per sample; None when one is missing or
    not of the field's one dtype (the per-sample path then gives the values, or the
    error). An array without numbers ((0, 4), (1, 0)) pads as none of its rows, as
    collate_field pads it."""
    if not cells or None in cells:
        return None
    present = cast(Sequence[bytes], cells)
    try:
        starts = [10 + (cell[8] | cell[9] << 8) for cell in present]
        heads = [cell[10:start] for cell, start in zip(present, starts, strict=True)]
        layouts = [_layout(head) for head in heads]
    except (IndexError, ValueError):
        return None
    dtypes = {layout[0] for layout in layouts}
    if len(dtypes) != 1:
        return None
    dtype = dtypes.pop()
    counts = np.array([layout[2] for layout in layouts], dtype=np.int64)
    joined = b"".join([cell[start:] for cell, start in zip(present, starts, strict=True)])
    if len(joined) != int(counts.sum()) * dtype.itemsize:
        return None
    return NumberArrays(np.frombuffer(joined, dtype), _starts(counts),
                        tuple([layout[1] for layout in layouts]),
                        (dtype.kind == "f",) * len(present))


def pad_layout(shapes: Iterable[tuple[int, ...]]
               ) -> tuple[dict[tuple[int, ...], int], tuple[int, ...] | None]:
    """How collate pads arrays of these shapes: the rows each shape pads as (its first
    dimension; 0 for an array without numbers, (0, 4) or (1, 0)), and the one trailing
    shape of those with numbers (None where they differ, or none has numbers)."""
    rows = {shape: shape[0] if math.prod(shape) else 0 for shape in set(shapes)}
    trailing = {shape[1:] for shape, count in rows.items() if count}
    return rows, trailing.pop() if len(trailing) == 1 else None


@functools.lru_cache(maxsize=4096)
def _layout(header: bytes) -> tuple[np.dtype[np.generic], tuple[int, ...], int]:
    """(dtype, shape, number count) of an array value's header text (ValueError for one
    this library does not write), remembered for the next values of the same shape."""
    dtype, shape = parsed_header(header)
    return dtype, shape, int(np.prod(shape))
