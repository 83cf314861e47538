"""Fields as columns, one per field, for the formats written in one go at the end (hdf5, npy).

    int      int64 (N,)    0 where a sample has no value
    float    float64 (N,)  NaN where a sample has no value
    str, json, bytes,      variable-length: the byte form of each value (UTF-8 text,
    floats, ints           compact JSON, raw bytes, .npy bytes), b"" where a sample has
                           no value
    present  bool (N,)     which samples have a value (an empty string is a value)

Built from the field records the conversion's table holds (`FieldRows`), so a resumed
npy run gets the fields of the parts it kept too. Numbers are stored as numbers, which
stock tools read directly; `value_bytes` turns one back into the byte form, which is
what the digest checks (repr of the float64, the decimal int).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packer.core.field_table import FieldRows
from packer.core.fields import FieldSpec, FieldType, decode_value, encode_value, unpack_record

NUMERIC: dict[FieldType, type[np.generic]] = {"int": np.int64, "float": np.float64}
MISSING = {"int": 0, "float": float("nan")}


@dataclass(frozen=True)
class Column:
    """One field over every sample: numbers, or byte forms (`values`), and `present`."""

    spec: FieldSpec
    present: npt.NDArray[np.bool_]
    numbers: npt.NDArray[np.generic] | None  # int and float fields
    values: list[bytes] | None  # the other fields


def columns(specs: Sequence[FieldSpec], rows: FieldRows | None, count: int) -> list[Column]:
    """Each field's column, from the records of `count` samples."""
    if not specs:
        return []
    records = [unpack_record(rows.record(i), len(specs)) for i in range(count)] \
        if rows is not None else [[None] * len(specs)] * count
    return columns_of(specs, records)


def columns_of(specs: Sequence[FieldSpec],
               records: Sequence[Sequence[bytes | None]]) -> list[Column]:
    """Each field's column, from every sample's values in byte form (None: no value)."""
    built = []
    for number, spec in enumerate(specs):
        cells = [record[number] for record in records]
        present = np.array([cell is not None for cell in cells], dtype=np.bool_)
        if spec.type in NUMERIC:
            numbers = np.array([MISSING[spec.type] if cell is None
                                else decode_value(spec.type, cell) for cell in cells],
                               dtype=NUMERIC[spec.type])
            built.append(Column(spec, present, numbers, None))
        else:
            built.append(Column(spec, present, None, [cell or b"" for cell in cells]))
    return built


def offsets_and_data(values: Sequence[bytes]) -> tuple[npt.NDArray[np.int64],
                                                       npt.NDArray[np.uint8]]:
    """Variable-length values back to back (data) and where each starts (offsets,
    N + 1): value i is data[offsets[i]:offsets[i + 1]]. npy's offsets + data files and
    hdf5's array blobs."""
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum([len(value) for value in values], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(values), np.uint8)


def sliced_values(flags: list[bool], offsets: npt.NDArray[np.int64],
                  data: npt.NDArray[np.uint8], wanted: npt.NDArray[np.intp]
                  ) -> list[bytes | None]:
    """The values at `wanted` of an offsets + data pair (None where `flags` says no
    value), one copy each."""
    starts, stops = offsets[wanted].tolist(), offsets[wanted + 1].tolist()
    view = data.data  # slicing a memoryview costs a fraction of an array's
    return [view[start:stop].tobytes() if flag else None
            for flag, start, stop in zip(flags, starts, stops, strict=True)]


def by_sample(columns: Sequence[list[bytes | None]], count: int) -> list[list[bytes | None]]:
    """Columns of `count` values (one per field) turned into each sample's values."""
    return [list(row) for row in zip(*columns, strict=True)] if columns \
        else [[] for _ in range(count)]


def value_bytes(kind: FieldType, stored: object) -> bytes:
    """The byte form of a value as a column holds it (a numpy number, str or bytes)."""
    if kind == "int":
        return encode_value("int", int(stored))  # type: ignore[call-overload]
    if kind == "float":
        return encode_value("float", float(stored))  # type: ignore[arg-type]
    if isinstance(stored, str):
        return stored.encode("utf-8", "surrogatepass")
    if isinstance(stored, np.ndarray):
        return stored.tobytes()
    if isinstance(stored, bytes | bytearray | memoryview):
        return bytes(stored)
    raise TypeError(f"a {type(stored).__name__} is not a stored field value")
