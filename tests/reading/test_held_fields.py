"""fields_in_memory=True (readers.held_fields): the same samples and batches as fields
read from the format, in every format, both datasets, 0 and 2 workers (fork, spawn)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from packer.errors import CorruptDatasetError
from readers import PackedDataset, PackedIterableDataset, collate
from readers.held_fields import HeldArrays, HeldSpans
from tests.field_array_support import pack_every_format
from tests.field_support import same_bits
from tests.helpers import FORMATS, pack_with_fields

ORDER = [5, 0, 3, 3, 11, 2, 9, 1, 7, 4, 8, 6, 10]  # repeats, and batches with and without
BATCHES = [ORDER[:4], ORDER[4:5], ORDER[5:], [0], [11, 1]]  # a missing value in them


@pytest.fixture(scope="module")
def stressed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every format with tests.helpers' fields: str, json, float, int, nulls, unicode."""
    root = tmp_path_factory.mktemp("held")
    return {fmt: pack_with_fields(root / fmt, fmt)[0] for fmt in FORMATS}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every format with floats and ints fields: ragged, empty, missing, NaN, -0.0."""
    return pack_every_format(tmp_path_factory.mktemp("held-arrays"))[0]


def pair(path: Path, **options: Any) -> tuple[PackedDataset, PackedDataset]:
    read = PackedDataset(path, fields="all", with_keys=True, **options)
    return read, PackedDataset(path, fields="all", with_keys=True, fields_in_memory=True,
                               **options)


def assert_same_batches(read: PackedDataset, held: PackedDataset) -> None:
    for batch in BATCHES:
        got, want = held.__getitems__(batch), read.__getitems__(batch)
        assert same_bits(list(got), list(want))
        assert same_bits(collate(got), collate(want))
    assert same_bits(held[3], read[3])


@pytest.mark.parametrize("fmt", FORMATS)
def test_held_fields_give_the_read_ones_bit_for_bit(stressed: dict[str, Path], fmt: str) -> None:
    read, held = pair(stressed[fmt])
    assert held._held is not None
    caption, meta = held._held.held["caption"], held._held.held["meta"]
    assert isinstance(caption, HeldSpans) and isinstance(caption.buffer, str)
    assert isinstance(meta, HeldSpans) and isinstance(meta.buffer, bytes)
    assert_same_batches(read, held)
    read.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_held_array_fields_gather_the_read_numbers(arrays: dict[str, Path], fmt: str) -> None:
    read, held = pair(arrays[fmt])
    assert held._held is not None
    assert {type(column) for column in held._held.held.values()} == {HeldArrays}
    assert held._held.nbytes > 0
    assert_same_batches(read, held)
    read.close()


def test_a_pickled_dataset_carries_its_held_fields(arrays: dict[str, Path]) -> None:
    read, held = pair(arrays["lmdb"])
    copy = pickle.loads(pickle.dumps(held))
    held.close()
    assert_same_batches(read, copy)
    copy.close()


@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize(("context", "workers"), [(None, 0), ("fork", 2), ("spawn", 2)])
def test_loaders_over_held_fields_give_the_read_batches(stressed: dict[str, Path],
                                                        iterable: bool, context: str | None,
                                                        workers: int) -> None:
    path = stressed["wds"]
    make: Any = PackedIterableDataset if iterable else PackedDataset
    options: dict[str, Any] = {"shuffle": False} if iterable else {}
    batches = []
    for in_memory in (False, True):
        ds = make(path, fields="all", with_keys=True, fields_in_memory=in_memory, **options)
        extra = {"multiprocessing_context": context} if workers else {}
        loader = DataLoader(ds, batch_size=3, num_workers=workers, collate_fn=collate,
                            **extra)
        batches.append(sorted(loader, key=lambda batch: batch["key"][0]))
    assert len(batches[1]) == len(batches[0]) > 1
    assert same_bits(batches[1], batches[0])


def test_fields_in_memory_needs_fields(stressed: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="fields_in_memory=True holds the fields that fields="):
        PackedDataset(stressed["wds"], fields_in_memory=True)


def test_a_damaged_value_is_refused_when_the_fields_are_held(tmp_path: Path) -> None:
    """The one check of held fields is the read that builds them: a damaged value
    stops the dataset there, naming the file, as reading the sample would."""
    folder, _ = pack_with_fields(tmp_path, "npy")
    data = folder / "fields" / "caption.data.npy"
    values = np.load(data)
    values[len(values) // 2] ^= 0x20  # a letter's case: same size, another digest
    np.save(data, values)
    with pytest.raises(CorruptDatasetError, match="do not match their digest"):
        PackedDataset(folder, fields="all", fields_in_memory=True)
