"""Array fields (`floats`: float32, `ints`: int64): numbers stored as numbers.

Boxes, keypoints or per-box class ids held as a `json` field are JSON text, and turning
that text back into numbers (correctly rounded) costs most of what reading a detection
sample's fields costs. An array field stores them as the numbers themselves, in the one
byte form every format keeps, hashes and compares:

    a .npy file (format 1.0, little-endian, C order), with the shortest header numpy
    accepts, padded to a multiple of 64 bytes (64, or 128 for a longer shape):
    b"\\x93NUMPY\\x01\\x00" + length + "{'descr':'<f4','fortran_order':False,
    'shape':(3,4)}" + spaces + "\\n", then the numbers

`np.load` (and stock webdataset's `.npy` decoder) reads it as it is. The header is
written here, not by numpy, so that the bytes (and the digests over them) never depend
on numpy's version; it is read back by an exact match of that pattern, so a file of
any other shape is refused rather than guessed at.

A value is a (nested, rectangular) list of numbers or a numpy array; `[]` is shape
(0,). `floats` takes ints and floats and refuses a finite number beyond float32's range
(it would become infinity); `ints` takes integers within int64 only (1.0 is refused).
Bools, strings, None and ragged lists are refused, never converted.
"""

from __future__ import annotations

import functools
import itertools
import re
import struct
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from packer.errors import ArrayValueError as ArrayValueError  # defined with every error class

ArrayType = Literal["floats", "ints"]
DTYPES: dict[str, np.dtype[np.generic]] = {"floats": np.dtype("<f4"), "ints": np.dtype("<i8")}
MAGIC = b"\x93NUMPY\x01\x00"
ALIGN = 64
_HEADER = re.compile(rb"\{'descr':'(<f4|<i8)','fortran_order':False,'shape':\(([0-9,]*)\)\} *\n")
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the largest finite float32
_MAX_DIMS = 64  # numpy's


def encode_array(kind: ArrayType, value: object) -> bytes:
    """The byte form (a .npy file) of `value` as a `kind` field."""
    array = _as_numbers(kind, value)
    return header(array.dtype, array.shape) + array.tobytes()


def _as_numbers(kind: ArrayType, value: object) -> npt.NDArray[np.generic]:
    if isinstance(value, np.ndarray):
        if value.ndim == 0 or value.dtype.kind not in _KINDS[kind]:
            raise ArrayValueError(f"a {value.dtype} array of shape {value.shape} is not "
                                  f"{wanted(kind)}")
        return _narrowed(kind, value)
    if not isinstance(value, list):
        raise ArrayValueError(f"{_a(type(value).__name__)} is not {wanted(kind)}")
    try:
        array = np.array(value)
    except (ValueError, OverflowError):  # ragged, or numbers numpy cannot hold
        return _narrowed(kind, _from_objects(kind, value))
    # numpy reads bools beside numbers as numbers: refused. An empty list is float64
    # to numpy, and an empty array of either type here.
    if array.ndim and (not array.size or (array.dtype.kind in _KINDS[kind]
                                          and not _holds_bool(value, array.ndim))):
        return _narrowed(kind, array)
    return _narrowed(kind, _from_objects(kind, value))


_KINDS = {"floats": "iuf", "ints": "iu"}


def _from_objects(kind: ArrayType, value: list[Any]) -> npt.NDArray[np.generic]:
    """The slow path, for what numpy did not read as numbers: the array, when every
    element is a Python number of the type (integers beyond int64 in a floats value),
    else why not."""
    try:
        objects = np.array(value, dtype=object)
    except ValueError as exc:
        raise ArrayValueError(f"a ragged list is not {wanted(kind)} (every list the same "
                              "length)") from exc
    allowed = (int,) if kind == "ints" else (int, float)
    numbers = objects.reshape(-1)  # not .flat: numpy iterates 32 dimensions at most
    if any(type(x) is list for x in numbers):  # a list gives 1 dimension or more
        if objects.ndim == _MAX_DIMS:  # numpy stopped nesting there
            raise ArrayValueError(f"a list nested deeper than {_MAX_DIMS} is not "
                                  f"{wanted(kind)}")
        raise ArrayValueError(f"a ragged list is not {wanted(kind)} (every list the same "
                              "length)")
    if any(type(x) not in allowed for x in numbers):
        raise ArrayValueError(f"not {wanted(kind)} (numbers only)")
    if kind == "ints":
        if not all(-(1 << 63) <= x < 1 << 63 for x in numbers):
            raise ArrayValueError("an integer beyond int64")
        return numbers.astype(np.int64).reshape(objects.shape)
    try:
        return numbers.astype(np.float64).reshape(objects.shape)
    except OverflowError as exc:  # an int beyond any float
        raise ArrayValueError(f"a number beyond float32's range ({FLOAT32_MAX:.4g}); use "
                              "a json field to keep it") from exc


def _a(name: str) -> str:
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _holds_bool(value: list[Any], depth: int) -> bool:
    flat: Iterable[Any] = value
    for _ in range(depth - 1):
        flat = itertools.chain.from_iterable(flat)
    return bool in set(map(type, flat))


def _narrowed(kind: ArrayType, array: np.ndarray) -> npt.NDArray[np.generic]:
    """`array` as the field's dtype; a finite number float32 cannot hold is refused."""
    if kind == "ints":
        if array.dtype.kind == "u" and array.size and int(array.max()) >= 1 << 63:
            raise ArrayValueError("an integer beyond int64")
        return np.ascontiguousarray(array, dtype=DTYPES["ints"])
    if array.size and float(np.fmax.reduce(np.abs(array.astype(np.float64, copy=False)),
                                            axis=None)) > FLOAT32_MAX:  # NaN skipped
        finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
        if finite.size and float(np.abs(finite.astype(np.float64)).max()) > FLOAT32_MAX:
            raise ArrayValueError(f"a number beyond float32's range ({FLOAT32_MAX:.4g}); "
                                  "use a json field to keep it")
    return np.ascontiguousarray(array, dtype=DTYPES["floats"])


@functools.lru_cache(maxsize=4096)
def header(dtype: np.dtype[np.generic], shape: tuple[int, ...]) -> bytes:
    """The .npy header of an array of this dtype and shape (see the module docstring)."""
    dims = ",".join(str(n) for n in shape) + ("," if len(shape) == 1 else "")
    text = f"{{'descr':'{dtype.str}','fortran_order':False,'shape':({dims})}}".encode("ascii")
    padding = -(len(MAGIC) + 2 + len(text) + 1) % ALIGN
    body = text + b" " * padding + b"\n"
    return MAGIC + struct.pack("<H", len(body)) + body


def split(data: bytes | memoryview) -> tuple[np.dtype[np.generic], tuple[int, ...], int]:
    """(dtype, shape, where the numbers start) of an array's byte form; ArrayValueError
    when it is not one this module writes, or its length does not match."""
    raw = bytes(data[:10])
    if len(raw) < 10 or raw[:8] != MAGIC:
        raise ArrayValueError("not an array field value (no .npy header)")
    (length,) = struct.unpack("<H", raw[8:10])
    dtype, shape = parsed_header(bytes(data[10 : 10 + length]))
    start = 10 + length
    if len(data) - start != dtype.itemsize * int(np.prod(shape)):
        raise ArrayValueError(f"an array field value of shape {shape} holds "
                              f"{len(data) - start} bytes")
    return dtype, shape, start


@functools.lru_cache(maxsize=4096)
def parsed_header(text: bytes) -> tuple[np.dtype[np.generic], tuple[int, ...]]:
    """(dtype, shape) of a header's text (after its length); ArrayValueError if it is
    not one `header` writes."""
    found = _HEADER.fullmatch(text)
    if found is None:
        raise ArrayValueError("an array field value with a header this library does not write")
    dtype = np.dtype(found.group(1).decode("ascii"))
    shape = tuple(int(n) for n in found.group(2).split(b",") if n)
    # the pattern lets through shapes np.load cannot read ("(03,)", "(,2,)", "(1,,2)")
    # and more padding than ours: only the header `header` writes is this array's
    if not shape or header(dtype, shape)[10:] != text:
        raise ArrayValueError("an array field value with a malformed shape or header")
    return dtype, shape


def decode_array(data: bytes | memoryview) -> npt.NDArray[np.generic]:
    """The array of a byte form (a read-only view of `data` when it is bytes)."""
    dtype, shape, start = split(data)
    return np.frombuffer(data, dtype=dtype, offset=start).reshape(shape)


def wanted(kind: ArrayType) -> str:
    """What a `kind` value must be, for an error message."""
    return "a list of integers (int64)" if kind == "ints" else "a list of numbers (float32)"
