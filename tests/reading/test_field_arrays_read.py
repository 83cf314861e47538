"""Reading array fields (`floats`, `ints`): every format through both readers, 0 and 2
DataLoader workers (fork; spawn for npy), equal to np.float32 / np.int64 of the source,
and readers.collate's padding; a batch (`__getitems__`, whose arrays are joined by
stored_arrays) gives exactly what each sample alone (`ds[i]`) gives, also when some
samples have no value (then every value of that field is decoded one by one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, collate
from readers.batching._number_arrays import NumberArrays
from readers.batching.batch import Batch
from readers.batching.fields_collate import collate_dicts
from readers.options import PartitionOptions, RemoteOptions
from tests.field_array_support import NAMES, Expected, pack_every_format, same_array
from tests.field_support import same_bits
from tests.helpers import FORMATS

TRAILING = {"boxes": (4,), "ids": ()}  # each value's shape after its first dimension


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Expected]:
    return pack_every_format(tmp_path_factory.mktemp("array_read"))


def check_sample(sample: dict[str, Any], expected: Expected) -> str:
    """The sample's arrays are the source's, bit for bit; returns its key."""
    assert list(sample) == ["image", "label", *NAMES, "key"]
    for name in NAMES:
        assert same_array(sample[name], expected[sample["key"]][name]), (sample["key"], name)
    return str(sample["key"])


def same_sample(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return list(got) == list(want) and torch.equal(got["image"], want["image"]) \
        and got["label"] == want["label"] and got["key"] == want["key"] \
        and all(same_array(got[name], None if want[name] is None else want[name].numpy())
                for name in NAMES)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batch_gives_what_each_sample_gives(packed: tuple[dict[str, Path], Expected],
                                             fmt: str) -> None:
    folders, expected = packed
    ds = PackedDataset(folders[fmt], fields="all", with_keys=True)
    singles = [ds[i] for i in range(len(ds))]
    assert sorted(check_sample(sample, expected) for sample in singles) == sorted(expected)
    keys = [sample["key"] for sample in singles]
    complete = [i for i, key in enumerate(keys)
                if all(expected[key][name] is not None for name in NAMES)]
    for positions in (list(range(len(ds))), complete, complete[::-1], [5, 6, 0], [1, 2], [0]):
        batch = ds.__getitems__(positions)
        assert isinstance(batch, Batch) and batch.fields is not None
        for name in NAMES:  # joined when every sample has a value, one by one otherwise
            joined = all(expected[keys[i]][name] is not None for i in positions)
            assert isinstance(batch.fields[name], NumberArrays) == joined, (positions, name)
        assert all(same_sample(got, singles[i])
                   for got, i in zip(batch, positions, strict=True))
        assert same_bits(collate(batch), collate_dicts([singles[i] for i in positions], collate))


def check_batch(batch: dict[str, Any], expected: Expected) -> list[str]:
    """A readers.collate batch: each array field zero-padded to (B, max n, *trailing) in
    its dtype with `<name>_lengths`, or, where a sample has no value, a list; its keys."""
    keys = list(batch["key"])
    for name in NAMES:
        wants = [expected[key][name] for key in keys]
        got = batch[name]
        if any(want is None for want in wants):
            assert type(got) is list and name + "_lengths" not in batch
            assert all(same_array(g, w) for g, w in zip(got, wants, strict=True))
            continue
        lengths = [len(want) for want in wants]
        assert got.dtype == torch.from_numpy(wants[0]).dtype
        assert tuple(got.shape) == (len(keys), max(lengths), *TRAILING[name])
        if len(keys) > 1:  # distinct box counts (array_rows): ragged, so padded
            assert batch[name + "_lengths"].tolist() == lengths
        for row, (want, n) in enumerate(zip(wants, lengths, strict=True)):
            assert not got[row, n:].any()
            assert not n or same_array(got[row, :n], want)
    return keys


def epoch_batches(path: Path, expected: Expected, workers: int,
                  context: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every checked batch of one seeded epoch: iterable, then map-style."""
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    it = PackedIterableDataset(path, fields="all", with_keys=True, batch_size=4, seed=3,
                               partition=PartitionOptions(chunk_size=3, drop_last=False))
    ds = PackedDataset(path, fields="all", with_keys=True, chunk_size=3)
    loaders = (DataLoader(it, batch_size=4, num_workers=workers, collate_fn=collate, **extra),
               DataLoader(ds, batch_size=4, sampler=ChunkSampler(ds, seed=3),
                          num_workers=workers, collate_fn=collate, **extra))
    streamed, mapped = ([dict(batch) for batch in loader] for loader in loaders)
    for batches in (streamed, mapped):
        keys = [key for batch in batches for key in check_batch(batch, expected)]
        assert sorted(keys) == sorted(expected)  # every sample once
    return streamed, mapped


@pytest.mark.parametrize("fmt", FORMATS)
def test_loaders_with_0_and_2_workers_give_the_source_values(
        packed: tuple[dict[str, Path], Expected], fmt: str) -> None:
    folders, expected = packed
    _, reference = epoch_batches(folders[fmt], expected, 0, None)
    _, mapped = epoch_batches(folders[fmt], expected, 2, "fork")
    # the sampler makes the batches: bit-identical whoever reads them (each worker
    # streams its own share of the iterable one, checked against the source above)
    assert same_bits(mapped, reference)
    for name in NAMES:  # seed 3 makes batches of both kinds: padded, and a list
        assert {name + "_lengths" in batch for batch in reference} == {True, False}


@pytest.mark.spawn
def test_spawned_workers_give_the_same_batches(packed: tuple[dict[str, Path], Expected]) -> None:
    folders, expected = packed
    _, reference = epoch_batches(folders["npy"], expected, 0, None)
    _, mapped = epoch_batches(folders["npy"], expected, 2, "spawn")
    assert same_bits(mapped, reference)


@pytest.mark.parametrize("fmt", ["hdf5", "npy"])
def test_a_url_reads_the_arrays(packed: tuple[dict[str, Path], Expected], fmt: str,
                                tmp_path: Path) -> None:
    """hdf5 memory-maps its array blob from the file the URL cache holds."""
    folders, expected = packed
    ds = PackedDataset(folders[fmt].as_uri(), fields="all", with_keys=True,
                       remote=RemoteOptions(cache_dir=tmp_path))
    batch = ds.__getitems__(list(range(len(ds))))
    assert sorted(check_sample(sample, expected) for sample in batch) == sorted(expected)
    assert np.array_equal(ds[len(ds) - 1]["ids"].numpy(), np.arange(50))
