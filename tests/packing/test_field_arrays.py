"""Array fields (`floats`: float32, `ints`: int64), value by value: the byte form (a .npy
file with a header of our own), what is refused, and the readers' batch fast path
(stored_arrays) against the per-sample one. Packed datasets: test_field_arrays_pack.py
and test_field_arrays_read.py."""

from __future__ import annotations

import io
import math
import re
import struct
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from packer.core.field_arrays import split
from packer.core.fields import FieldSpec, FieldValueError, decode_value, encode_value
from readers import collate
from readers.batching._number_arrays import NumberArrays
from readers.batching.batch import Batch
from readers.batching.fields_collate import collate_dicts
from readers.fields import field_columns, natural
from tests.field_array_support import DTYPES, same_array
from tests.field_support import same_bits

FLOAT32_MAX = float(np.finfo(np.float32).max)


def nested(numbers: list[Any], shape: tuple[int, ...]) -> list[Any]:
    return np.array(numbers, dtype=object).reshape(shape).tolist()  # type: ignore[no-any-return]


SHAPES = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)
NUMBERS = {"floats": st.floats(-FLOAT32_MAX, FLOAT32_MAX) | st.integers(-(2**64), 2**64)
           | st.sampled_from([math.inf, -math.inf, math.nan]),
           "ints": st.integers(-(2**63), 2**63 - 1)}


@st.composite
def list_values(draw: st.DrawFn, kind: str) -> list[Any]:
    shape = draw(SHAPES)
    count = math.prod(shape)
    return nested(draw(st.lists(NUMBERS[kind], min_size=count, max_size=count)), shape)


def check_byte_form(data: bytes, want: np.ndarray) -> None:
    """`data` decodes to `want`, np.load reads it as it is, its header is 64-aligned."""
    start = 10 + struct.unpack("<H", data[8:10])[0]
    assert data[:8] == b"\x93NUMPY\x01\x00" and start % 64 == 0 and data[start - 1] == 10
    assert len(data) == start + want.nbytes
    assert same_array(decode_value("floats" if want.dtype.kind == "f" else "ints", data), want)
    assert same_array(np.load(io.BytesIO(data), allow_pickle=False), want)
    assert split(data) == (want.dtype, want.shape, start)


@given(st.sampled_from(["floats", "ints"]).flatmap(
    lambda kind: st.tuples(st.just(kind), list_values(kind))))
def test_nested_lists_round_trip(case: tuple[str, list[Any]]) -> None:
    kind, value = case
    check_byte_form(encode_value(kind, value), np.array(value, DTYPES[kind]))  # type: ignore[arg-type]


INT_DTYPES = hnp.integer_dtypes(endianness="?") | hnp.unsigned_integer_dtypes(endianness="?")


def accepted_elements(dtype: np.dtype[Any]) -> st.SearchStrategy[Any] | None:
    """Numbers of `dtype` its field takes (None: any of them): uint64 below 2**63,
    float64 within float32's range (or NaN, kept)."""
    if dtype.itemsize == 8 and dtype.kind == "u":
        return st.integers(0, 2**63 - 1)
    if dtype.itemsize == 8 and dtype.kind == "f":
        return st.floats(-FLOAT32_MAX, FLOAT32_MAX) | st.just(math.nan)
    return None


@st.composite
def numpy_values(draw: st.DrawFn, kind: str) -> np.ndarray:
    dtype = draw(INT_DTYPES if kind == "ints" else INT_DTYPES | hnp.floating_dtypes(
        endianness="?"))
    array = draw(hnp.arrays(dtype, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0,
                                                    max_side=4),
                            elements=accepted_elements(dtype)))
    return array.T if draw(st.booleans()) else array  # fortran order in: C order out


@given(st.sampled_from(["floats", "ints"]).flatmap(
    lambda kind: st.tuples(st.just(kind), numpy_values(kind))))
def test_numpy_arrays_of_any_number_dtype_round_trip(case: tuple[str, np.ndarray]) -> None:
    kind, array = case
    check_byte_form(encode_value(kind, array), array.astype(DTYPES[kind]))  # type: ignore[arg-type]


def test_the_header_is_ours_not_numpys() -> None:
    assert encode_value("floats", [[1, 2, 3, 4]]) == \
        b"\x93NUMPY\x01\x006\x00{'descr':'<f4','fortran_order':False,'shape':(1,4)}  \n" \
        + struct.pack("<4f", 1, 2, 3, 4)
    assert encode_value("ints", []) == \
        b"\x93NUMPY\x01\x006\x00{'descr':'<i8','fortran_order':False,'shape':(0,)}   \n"
    deep = encode_value("ints", np.zeros((10, 1, 1), np.int8))  # past 64 bytes: to 128
    assert deep[:10] == b"\x93NUMPY\x01\x00v\x00" and deep[10:64].endswith(b"(10,1,1)}")
    assert deep[64:128] == b" " * 63 + b"\n" and deep[128:] == bytes(80)
    full = encode_value("floats", np.zeros((2, 3, 4)))  # a header that fills 64 exactly
    assert full[:64].endswith(b"'fortran_order':False,'shape':(2,3,4)}\n")


def in_lists(value: object, depth: int) -> object:
    """`value` inside `depth` lists."""
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("kind", "value", "words"), [
    ("floats", [True, 1.0], "numbers only"), ("ints", [[1, False]], "numbers only"),
    ("floats", ["1.0"], "numbers only"), ("floats", [[1.0, None]], "numbers only"),
    ("floats", [[1, 2], [3]], "same length"), ("ints", [[1], [[2]]], "same length"),
    ("floats", 1.5, "a float is not"), ("ints", None, "a NoneType is not"),
    ("floats", np.array(1.0), "shape ()"), ("ints", [2**63], "beyond int64"),
    ("ints", [-(2**63) - 1], "beyond int64"), ("ints", np.array([2**63], np.uint64), "int64"),
    ("floats", [1e39], "beyond float32"), ("floats", np.array([-1e39]), "beyond float32"),
    ("floats", [2**1100], "beyond float32"), ("ints", [1.0], "integers"),
    ("ints", np.array([1.0]), "float64 array"), ("floats", np.array([True]), "bool array"),
    ("floats", np.array(["1"]), "<U1 array"), ("floats", np.array([1j]), "complex"),
    ("floats", np.float32(1), "a float32 is not"), ("floats", (1.0, 2.0), "a tuple is not"),
    # past numpy's 32-dimension iterators and its 64 dimensions: a reason, not a RuntimeError
    ("floats", in_lists(True, 40), "numbers only"), ("ints", in_lists(2**64, 33), "beyond int64"),
    ("floats", in_lists(1.5, 65), "nested deeper than 64"),
    ("ints", in_lists(1, 65), "nested deeper than 64")])
def test_values_that_are_not_arrays_of_the_type_are_refused(kind: str, value: object,
                                                            words: str) -> None:
    with pytest.raises(FieldValueError, match=re.escape(words)):
        encode_value(kind, value)  # type: ignore[arg-type]


def test_inf_and_nan_are_kept() -> None:
    got = decode_value("floats", encode_value("floats", [math.inf, -math.inf, math.nan]))
    assert np.isposinf(got[0]) and np.isneginf(got[1]) and np.isnan(got[2])  # type: ignore[index]


def numpy_saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def crafted(shape: bytes, numbers: int, length: int = 64) -> bytes:
    """A .npy value with our header's pattern around `shape`, `length` bytes of header."""
    text = b"{'descr':'<f4','fortran_order':False,'shape':" + shape + b"}"
    body = text + b" " * (length - 11 - len(text)) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body + bytes(4 * numbers)


FOREIGN = {  # np.load refuses the first three; the next two are not padded as ours are
    "0-led": crafted(b"(03,)", 3), "comma-led": crafted(b"(,2,)", 2),
    "double-comma": crafted(b"(1,,2)", 2), "padded-128": crafted(b"(2,)", 2, length=128),
    "padded-63": crafted(b"(2,)", 2, length=63),
    "big-endian": numpy_saved(np.arange(4, dtype=">f4")),
    "fortran": numpy_saved(np.zeros((2, 3), np.float32, order="F")),
    "numpy-header": numpy_saved(np.arange(3, dtype=np.int64)),  # with spaces: not ours
    "float64": numpy_saved(np.arange(3, dtype=np.float64)),
    "short": encode_value("floats", [1.0, 2.0])[:-1],
    "long": encode_value("floats", [1.0, 2.0]) + b"\0",
    "cut-header": encode_value("ints", [[1, 2]])[:40], "magic-only": b"\x93NUMPY\x01",
    "empty": b"", "json": b"[1.0, 2.0]"}


@pytest.mark.parametrize("name", FOREIGN)
def test_a_truncated_or_foreign_npy_is_refused(name: str) -> None:
    assert split(crafted(b"(2,)", 2)) == (np.dtype("<f4"), (2,), 64)  # the pattern itself
    data = FOREIGN[name]
    with pytest.raises(ValueError, match="array field value"):
        split(data)
    with pytest.raises(ValueError, match="array field value"):
        decode_value("floats", data)


# --- the batch fast path (stored_arrays) against the per-sample one ------------------------

@st.composite
def batch_values(draw: st.DrawFn) -> tuple[str, list[Any]]:
    """A field's values in a batch: mostly rows of one trailing shape (boxes: n by 4),
    which collate pads, some of any shape, some missing."""
    kind = draw(st.sampled_from(["floats", "ints"]))
    trailing = draw(st.lists(st.integers(1, 3), max_size=2).map(tuple))
    rows = st.integers(0, 4).flatmap(lambda n: st.lists(
        NUMBERS[kind], min_size=n * math.prod(trailing), max_size=n * math.prod(trailing))
        .map(lambda numbers: nested(numbers, (n, *trailing))))
    value = st.one_of(rows, rows, rows, list_values(kind), st.none())
    return kind, draw(st.lists(value, min_size=1, max_size=5))


@given(batch_values())
def test_a_joined_batch_gives_what_each_value_gives(case: tuple[str, list[Any]]) -> None:
    """Values and readers.collate's batch alike, whether the arrays joined or not."""
    kind, values = case
    cells = [None if v is None else encode_value(kind, v) for v in values]  # type: ignore[arg-type]
    columns = field_columns([(0, FieldSpec("boxes", kind))], [[cell] for cell in cells])  # type: ignore[arg-type]
    joined = all(v is not None for v in values)  # empty ones too: (0, 4), (1, 0)
    assert isinstance(columns["boxes"], NumberArrays) == joined
    batch = Batch([(torch.zeros(3, 2, 2, dtype=torch.uint8), 0)] * len(values), fields=columns)
    for k, value in enumerate(values):
        per_sample = None if value is None else natural(decode_value(kind, cells[k]))  # type: ignore[arg-type]
        assert same_bits(batch[k]["boxes"], per_sample)
        assert same_array(batch[k]["boxes"], None if value is None
                          else np.array(value, DTYPES[kind]))
    assert same_bits(collate(batch), collate_dicts(list(batch), collate))


@pytest.mark.parametrize("values", [[[[]], []], [[[], []], [[]]], [[[]], [[1, 2, 3, 4]]]])
def test_arrays_without_numbers_collate_as_each_sample_would(values: list[Any]) -> None:
    """[[]] (shape (1, 0)) beside []: the joined batch's padding crashed on it."""
    cells = [[encode_value("floats", value)] for value in values]
    batch = Batch([(torch.zeros(3, 2, 2, dtype=torch.uint8), 0)] * len(values),
                  fields=field_columns([(0, FieldSpec("boxes", "floats"))], cells))
    assert same_bits(collate(batch), collate_dicts(list(batch), collate))
    assert [tuple(sample["boxes"].shape) for sample in batch] == [np.shape(v) for v in values]

