"""`RecordReader.fields_many`: the batched read PackedDataset.__getitems__ uses.

For every format it must equal `fields(i)` sample by sample (names subsets, samples
missing values, repeated and unordered indices, the empty batch), and still catch a
damaged value: every sample of the batch is checked against its own digest.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from packer import formats
from packer.core.index import open_dataset
from packer.errors import CorruptDatasetError
from readers import PackedDataset
from readers.fields import natural
from readers.sampling.sampler import PAD_LABEL, PaddedIndex
from tests.helpers import FIELD_NAMES, FORMATS, pack_with_fields


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fields_many")
    return {fmt: pack_with_fields(root / fmt, fmt)[0] for fmt in FORMATS}


def bits(value: Any) -> Any:
    """Floats by their bits (-0.0 is not 0.0, NaN equals NaN here), recursively."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, list):
        return [bits(item) for item in value]
    if isinstance(value, dict):
        return {key: bits(item) for key, item in value.items()}
    return (type(value).__name__, value)


NAME_CHOICES = (None, list(FIELD_NAMES), ["boxes"], ["meta", "caption"], [])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("names", NAME_CHOICES, ids=str)
def test_fields_many_equals_fields_one_at_a_time(packed: dict[str, Path], fmt: str,
                                                 names: list[str] | None) -> None:
    folder = packed[fmt]
    index, table = open_dataset(folder)
    reader = formats.load(fmt).open_reader(folder, index, table)
    try:
        n = len(table)
        indices = [n - 1, 0, 3, 3, *range(1, n, 2)]  # unordered, repeated
        one_by_one = [reader.fields(i, names) for i in indices]
        batched = reader.fields_many(indices, names)
        assert bits(batched) == bits(one_by_one)
        assert reader.fields_many([], names) == []
        missing = [value for sample in one_by_one for value in sample.values() if value is None]
        if names is None:
            assert missing, "the source rows lack some values: the batch must keep the Nones"
    finally:
        reader.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_fields_many_refuses_an_unknown_name(packed: dict[str, Path], fmt: str) -> None:
    folder = packed[fmt]
    index, table = open_dataset(folder)
    reader = formats.load(fmt).open_reader(folder, index, table)
    try:
        with pytest.raises(KeyError, match="nope"):
            reader.fields_many([0, 1], ["caption", "nope"])
    finally:
        reader.close()


def test_fields_many_catches_a_damaged_value(tmp_path: Path) -> None:
    """A caption changed on disk fails the batch read, naming the sample."""
    folder, _ = pack_with_fields(tmp_path, "npy")
    data = folder / "fields" / "caption.data.npy"
    array = np.load(data)
    array[0] ^= 1  # one letter of the first caption (sample 0 has one: the helper's rows)
    np.save(data, array)
    index, table = open_dataset(folder)
    reader = formats.load("npy").open_reader(folder, index, table)
    try:
        with pytest.raises(CorruptDatasetError, match=r"sample 0 .*do not match their digest"):
            reader.fields_many([2, 0], ["boxes"])
    finally:
        reader.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_getitems_with_padded_indices_equals_getitem(packed: dict[str, Path], fmt: str) -> None:
    """The batched dataset path gives the samples ds[i] gives, padding repeats included."""
    dataset = PackedDataset(packed[fmt], fields="all", with_keys=True)
    indices: list[int] = [4, 1, PaddedIndex(4), PaddedIndex(0), 2]
    batch = dataset.__getitems__(indices)
    for position, sample in zip(indices, batch, strict=True):
        single = dataset[int(position)]
        assert list(sample) == list(single)
        assert sample["key"] == single["key"]
        want_label = PAD_LABEL if isinstance(position, PaddedIndex) else single["label"]
        assert sample["label"] == want_label
        for name in FIELD_NAMES:
            got, want = sample[name], single[name]
            if hasattr(got, "dtype"):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.numpy().tobytes() == want.numpy().tobytes()  # NaN equal to NaN
            else:
                assert bits(got) == bits(want)


def test_wds_fields_many_names_the_shard_of_a_damaged_value(tmp_path: Path) -> None:
    folder, _ = pack_with_fields(tmp_path, "wds")
    index, table = open_dataset(folder)
    assert table.fields is not None
    offset, size = table.fields.location(1)
    shard = folder / index.shards[index.shard_of(1)].name
    data = bytearray(shard.read_bytes())
    boxes = data.index(b"[[", offset, offset + size)  # sample 1's boxes member's value
    data[boxes + 2] ^= 1  # a digit of its first number
    shard.write_bytes(bytes(data))
    reader = formats.load("wds").open_reader(folder, index, table)
    try:
        with pytest.raises(CorruptDatasetError, match=rf"{shard.name}: the fields of sample 1 "):
            reader.fields_many([0, 1], None)
    finally:
        reader.close()


@pytest.mark.parametrize("numbers", [[float("nan"), 1e300], [1e300, float("nan")],
                                     [[float("nan"), 0.5], [-1e300, 1.0]]], ids=str)
def test_a_nan_does_not_hide_a_number_beyond_float32(numbers: list[Any]) -> None:
    """natural's quick float32 check ignores NaN: 1e300 beside one still keeps float64."""
    tensor = natural(numbers)
    assert str(tensor.dtype) == "torch.float64"
    assert tensor.numpy().tobytes() == np.array(numbers, np.float64).tobytes()
