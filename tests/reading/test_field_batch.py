"""The column path of fields (`Batch` with field columns, _number_arrays) gives exactly
what the per-sample path gave: each sample's dict, and `readers.collate`'s batch.

The per-sample path is the reference: json.loads + `natural` per value, and
`collate_dicts` over the materialized dicts. Compared bit for bit (dtype, shape, bytes).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from packer import formats
from packer.core.fields import FieldSpec, encode_value
from packer.core.index import open_dataset
from readers import PackedDataset, collate
from readers.batching._number_arrays import parse_arrays
from readers.batching.batch import Batch
from readers.batching.fields_collate import collate_dicts
from readers.fields import ReadFields, field_columns, fields_ahead, natural, with_fields_many
from tests.field_support import same_bits
from tests.helpers import FIELD_NAMES, FORMATS, pack_with_fields

NUMBERS = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, width=64),
    st.sampled_from([0, -0.0, 0.1, 1e-320, 3.4e38, 3.5e38, 2**53, 2**53 + 1, 1e16,
                     2**63 - 1, 2**63, -(2**63) - 1, 10**20]),  # ints numpy keeps as objects
)
ROW = st.lists(NUMBERS, min_size=1, max_size=4)
VALUES = st.one_of(
    st.lists(NUMBERS, max_size=6),                                   # flat
    st.integers(1, 4).flatmap(lambda k: st.lists(st.lists(NUMBERS, min_size=k, max_size=k),
                                                 min_size=1, max_size=5)),  # rectangular
    st.lists(ROW, max_size=4),                                       # often ragged
    st.lists(st.one_of(NUMBERS, st.text(max_size=3), st.booleans(), st.none()), max_size=4),
    st.none(),
)


def stored(value: Any) -> bytes | None:
    return None if value is None else encode_value("json", value)


def reference(text: bytes | None) -> Any:
    return None if text is None else natural(json.loads(text))


@given(VALUES)
def test_a_parsed_array_is_what_natural_gives(value: Any) -> None:
    text = stored(value)
    arrays = parse_arrays([text])
    if arrays is not None:  # None: the per-sample path, the reference itself
        assert same_bits(torch.from_numpy(arrays.array(0)), reference(text))


@given(st.lists(VALUES, min_size=1, max_size=6), st.booleans())
def test_a_batch_collates_as_its_dicts_do(values: list[Any], keyed: bool) -> None:
    texts = [stored(value) for value in values]
    spec = FieldSpec("boxes", "json")
    caption = FieldSpec("caption", "str")
    cells = [[text, f"caption {k}".encode()] for k, text in enumerate(texts)]
    samples = [(torch.zeros(3, 2, 2, dtype=torch.uint8), k, f"key{k}")[: 3 if keyed else 2]
               for k in range(len(values))]
    batch = Batch(samples, fields=field_columns([(0, spec), (1, caption)], cells))
    dicts = [{"image": s[0], "label": s[1], "boxes": reference(text), "caption": f"caption {k}",
              **({"key": s[2]} if keyed else {})}
             for k, (s, text) in enumerate(zip(samples, texts, strict=True))]
    assert same_bits(list(batch), dicts)
    assert same_bits(batch.collate_columns(collate), collate_dicts(dicts, collate))
    assert same_bits(pickle.loads(pickle.dumps(batch)), dicts)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("field_batch")
    return {fmt: pack_with_fields(root / fmt, fmt)[0] for fmt in FORMATS}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_dataset_batch_equals_its_samples_one_by_one(packed: dict[str, Path],
                                                       fmt: str) -> None:
    ds = PackedDataset(packed[fmt], fields="all", with_keys=True)
    order = [5, 0, 3, 3, *range(len(ds) - 1, 0, -2)]
    batch = ds.__getitems__(order)
    assert isinstance(batch, Batch) and batch.fields is not None
    assert set(FIELD_NAMES) <= set(batch[0])
    one_by_one = [ds[i] for i in order]
    assert same_bits(list(batch), one_by_one)
    assert same_bits(batch[1:3], one_by_one[1:3])
    assert same_bits(collate(batch), collate(one_by_one))
    ds.close()  # lmdb: one environment open per process
    index, table = open_dataset(packed[fmt])
    reader = formats.load(fmt).open_reader(packed[fmt], index, table)
    try:  # the format's own decoding, value by value: what samples held before columns
        for i, sample in zip(order, batch, strict=True):
            want = {name: natural(value) for name, value in reader.fields(i).items()}
            assert same_bits({name: sample[name] for name in want}, want)
    finally:
        reader.close()


def test_columns_give_the_dicts_of_the_readers_own_decoding(packed: dict[str, Path]) -> None:
    """The batch's columns, read ahead or at once, equal the reader's fields_many, value by
    value."""
    ds = PackedDataset(packed["npy"], fields="all")
    reader = ds.handles().reader
    order = [4, 1, 1, 0]
    plain = [(torch.zeros(1), k) for k in range(len(order))]
    names = tuple(FIELD_NAMES)
    source = ReadFields(reader, ds.index.fields)
    columns = with_fields_many(plain, source, order, names)
    decoded = [{"image": image, "label": label,
                **{name: natural(value) for name, value in values.items()}}
               for (image, label), values in zip(plain, reader.fields_many(order, names),
                                                 strict=True)]
    assert isinstance(columns, Batch) and columns.fields is not None
    assert same_bits(list(columns), decoded)
    ahead = fields_ahead(source, order, names)
    assert same_bits([ahead(k, sample) for k, sample in enumerate(plain)], decoded)
