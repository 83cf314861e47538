"""Per-sample fields: their names, their types and the one byte form of each type.

    type    value (Python)                     bytes (stored, hashed, compared)
    str     str                                UTF-8
    int     int (int64 range)                  decimal ASCII, e.g. b"-12"
    float   float                              repr, e.g. b"0.1", b"NaN", b"-Infinity"
    json    None/bool/int/float/str/list/dict  compact JSON, UTF-8 (json.dumps, no spaces)
    bytes   bytes                              the bytes as they are
    floats  list of numbers (nested, rectan-   a .npy file of float32 (an array field):
            gular) or a numpy array            boxes, keypoints
    ints    the same, integers                 a .npy file of int64: per-box class ids

Every format stores a field's value in this byte form (or, for numeric columns of
hdf5 and npy, as the number it spells) and the same form is hashed into the sample's
field digest, so `pack verify --source` compares fields across formats. The float
form is valid JSON for Python's json module (`json.loads(b"NaN")` works), and repr is
the shortest text that reads back to the same float: floats round-trip bit for bit.

A sample's fields travel through a conversion as one `bytes` value, the *fields
record*: for each field of the dataset, in the index's order, an 8-byte little-endian
length (-1: no value) and that many bytes. A dataset without fields has the empty
record b"" everywhere, and then nothing about fields is written at all.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from packer.core.field_arrays import ArrayValueError, decode_array, encode_array
from packer.errors import FieldValueError as FieldValueError  # defined with every error class

FieldType = Literal["str", "int", "float", "json", "bytes", "floats", "ints"]
FIELD_TYPES: tuple[FieldType, ...] = get_args(FieldType)
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED = frozenset({"image", "label", "key", "path", "cls"})  # names a sample already has
INT64 = (-(1 << 63), (1 << 63) - 1)
_LENGTH = struct.Struct("<q")
_MISSING = _LENGTH.pack(-1)
_PREFIXES = [_LENGTH.pack(size) for size in range(4096)]  # records_match


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a dataset: a name (a Python identifier) and a type."""

    name: str
    type: FieldType

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name) or self.name.endswith("_lengths"):
            raise ValueError(f"field name {self.name!r}: use letters, digits and _ (at most "
                             "64, not starting with a digit, not ending in _lengths)")
        if self.name in RESERVED:
            raise ValueError(f"field name {self.name!r} is taken by the sample itself; "
                             f"rename the column (reserved: {', '.join(sorted(RESERVED))})")
        if self.type not in FIELD_TYPES:
            raise ValueError(f"field {self.name!r}: type must be one of "
                             f"{', '.join(FIELD_TYPES)}, not {self.type!r}")

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type}


def parse_spec(text: str) -> FieldSpec:
    """`NAME:TYPE` (the CLI's --field) as a FieldSpec."""
    name, sep, kind = text.partition(":")
    if not sep:
        raise ValueError(f"--field {text!r}: write NAME:TYPE, TYPE one of "
                         f"{', '.join(FIELD_TYPES)}")
    return FieldSpec(name.strip(), kind.strip())  # type: ignore[arg-type]  # checked in it


def encode_value(kind: FieldType, value: object) -> bytes:
    """The byte form of `value` as a `kind` field; FieldValueError if it is not one."""
    if kind == "str" and isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        if not INT64[0] <= value <= INT64[1]:
            raise FieldValueError(f"{value} does not fit an int64")
        return str(value).encode("ascii")
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return _float_text(float(value)).encode("ascii")
    if kind == "json":
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                              allow_nan=True).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise FieldValueError(f"not JSON-serializable ({exc})") from exc
    if kind == "bytes" and isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if kind in ("floats", "ints"):
        try:
            return encode_array(kind, value)
        except ArrayValueError as exc:
            raise FieldValueError(f"{_short(value)}: {exc}") from exc
    raise FieldValueError(f"{type(value).__name__} value {_short(value)} is not a {kind}")


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def parse_text(kind: FieldType, text: str) -> bytes:
    """The byte form of a manifest cell `text` (CSV) for a `kind` field.

    str: the text; int/float: a number; json: JSON text. `bytes` cells name a file and
    are read by the scan, not here.
    """
    if kind == "str":
        return encode_value("str", text)
    if kind == "int":
        try:
            return encode_value("int", int(text.strip()))
        except ValueError as exc:
            raise FieldValueError(f"{_short(text)} is not an integer") from exc
    if kind == "float":
        try:
            value = float(text.strip())
        except ValueError as exc:
            raise FieldValueError(f"{_short(text)} is not a number") from exc
        if math.isinf(value) and text.strip().lstrip("+-").lower() not in ("inf", "infinity"):
            finite_float(text.strip())  # raises: a finite number that float() made infinite
        return encode_value("float", value)
    if kind in ("json", "floats", "ints"):
        try:
            return encode_value(kind, json.loads(text, parse_float=finite_float))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FieldValueError(f"{_short(text)} is not JSON ({exc})") from exc
    raise FieldValueError(f"a {kind} cell cannot be parsed from text")


def finite_float(text: str) -> float:
    """A JSON number's float (json's `parse_float`), refusing one beyond float64's range:
    json.loads reads 1e400 as infinity, a different number, and nothing would say so.
    (Infinity and NaN spelled out reach json's parse_constant, not this.)"""
    value = float(text)
    if math.isinf(value):
        raise FieldValueError(f"the number {_short(text)} is beyond float64's range (it would "
                              "be stored as infinity); write it as a string, or as Infinity")
    return value


def decode_value(kind: FieldType, data: bytes | memoryview) -> object:
    """The natural Python value of a field's byte form (the inverse of encode_value)."""
    raw = bytes(data)
    if kind == "str":
        return raw.decode("utf-8", "surrogatepass")
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(json.loads(raw))
    if kind == "json":
        return json.loads(raw)
    if kind in ("floats", "ints"):
        return decode_array(raw)
    return raw


def pack_record(values: Sequence[bytes | None]) -> bytes:
    """The fields record of one sample: each value's byte form, None where it has none."""
    return b"".join([_MISSING if value is None else _LENGTH.pack(len(value)) + value
                     for value in values])


def records_match(batch: Sequence[Sequence[bytes | None]], digests: Sequence[bytes],
                  digest: Callable[[bytes], bytes]) -> int:
    """The position of the first sample whose fields record does not hash to its
    digest, or -1: the check of a whole batch, pack_record inlined (the calls cost
    more than the hashing), the length prefixes of short values looked up, not packed
    (packing them is a large share of a batch's time)."""
    pack, prefixes, short = _LENGTH.pack, _PREFIXES, len(_PREFIXES)
    for k, (values, expected) in enumerate(zip(batch, digests, strict=True)):
        parts: list[bytes | memoryview] = []
        for value in values:
            if value is None:
                parts.append(_MISSING)
                continue
            size = len(value)
            parts.append(prefixes[size] if size < short else pack(size))
            parts.append(value)
        if digest(b"".join(parts)) != expected:
            return k
    return -1


def unpack_record(record: bytes | memoryview, count: int) -> list[bytes | None]:
    """The `count` values of a fields record (None: no value); ValueError if malformed."""
    view = memoryview(record)
    values: list[bytes | None] = []
    at = 0
    for _ in range(count):
        (length,) = _LENGTH.unpack_from(view, at)
        at += _LENGTH.size
        if length < 0:
            values.append(None)
            continue
        if at + length > len(view):
            raise ValueError("a fields record ends inside a value")
        values.append(bytes(view[at : at + length]))
        at += length
    if at != len(view):
        raise ValueError("a fields record holds more than its fields")
    return values


def decode_record(specs: Sequence[FieldSpec], record: bytes | memoryview,
                  names: Iterable[str] | None = None) -> dict[str, object]:
    """A fields record as {name: natural value or None}, for `names` (default: all)."""
    return decode_values(specs, unpack_record(record, len(specs)), names)


def decode_values(specs: Sequence[FieldSpec], values: Sequence[bytes | None],
                  names: Iterable[str] | None = None) -> dict[str, object]:
    """The values of a record (every field's, in the specs' order) as {name: natural value
    or None}, for `names` (default: all); only the names asked are decoded."""
    return decode_numbered(numbered(tuple(specs), None if names is None else tuple(names)),
                           values)


def decode_numbered(chosen: Sequence[tuple[int, FieldSpec]],
                    values: Sequence[bytes | None]) -> dict[str, object]:
    """decode_values with the fields chosen once (`numbered`) for a whole batch."""
    return {spec.name: None if values[number] is None
            else decode_value(spec.type, values[number])  # type: ignore[arg-type]
            for number, spec in chosen}


@functools.lru_cache(maxsize=256)
def numbered(specs: tuple[FieldSpec, ...], names: tuple[str, ...] | None
             ) -> tuple[tuple[int, FieldSpec], ...]:
    """(position in the record, spec) of each of `names` (all when None), as `select`
    (and its KeyError); cached: a dataset asks for the same names for every sample."""
    position = {spec.name: number for number, spec in enumerate(specs)}
    return tuple((position[spec.name], spec) for spec in select(specs, names))


def select(specs: Sequence[FieldSpec], names: Iterable[str] | None) -> tuple[FieldSpec, ...]:
    """The specs of `names` in the order asked (all when None); KeyError names an unknown one."""
    if names is None:
        return tuple(specs)
    by_name = {spec.name: spec for spec in specs}
    chosen = []
    for name in names:
        if name not in by_name:
            known = ", ".join(by_name) or "none"
            raise KeyError(f"no field {name!r} in this dataset (its fields: {known})")
        chosen.append(by_name[name])
    return tuple(chosen)


def specs_from_json(data: object) -> tuple[FieldSpec, ...]:
    """index.json's `fields` list (absent: no fields); ValueError on a bad entry."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ValueError(f"fields must be a list, not {_short(data)}")
    specs = []
    for entry in data:
        if not isinstance(entry, dict) or set(entry) != {"name", "type"}:
            raise ValueError(f"a field must be {{name, type}}, not {_short(entry)}")
        specs.append(FieldSpec(str(entry["name"]), entry["type"]))
    if len({spec.name for spec in specs}) != len(specs):
        raise ValueError("two fields share a name")
    return tuple(specs)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
