"""Reading per-sample fields: every format through both readers, equal to the source.

The source rows (tests.helpers.field_rows) hold unicode, empty and 10,000-character
captions, 0 to 50 boxes, floats that need every bit, huge ints, nested JSON, nulls and
missing keys. Lists of numbers (boxes) come back as float32 tensors, or float64 when a
number overflows float32; scalar floats are compared bit for bit.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, collate
from readers.fields import natural
from readers.options import PartitionOptions, RemoteOptions
from readers.sampling.sampler import PAD_LABEL
from tests.helpers import FIELD_NAMES, pack_every_format, pack_with_fields

FORMATS = ("wds", "lmdb", "hdf5", "npy")
Expected = dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Expected]]:
    root = tmp_path_factory.mktemp("fields_read")
    return {fmt: pack_with_fields(root / fmt, fmt) for fmt in FORMATS}


def same_value(got: Any, want: Any) -> bool:
    """Equal, floats bit for bit (-0.0 is not 0.0), lists of numbers as their tensors."""
    if isinstance(got, torch.Tensor):
        if not want:
            return got.shape == (0,)
        array = np.array(want)  # float64 or int64, as JSON gave them
        if got.dtype == torch.float32:  # the float32 nearest each number
            array = array.astype(np.float32)
        return torch.equal(got, torch.from_numpy(array))
    if isinstance(want, float):
        return type(got) is float and struct.pack("<d", got) == struct.pack("<d", want)
    return type(got) is type(want) and got == want


def check_sample(sample: Any, expected: Expected, names: tuple[str, ...]) -> str:
    """Sample's fields equal the source's; returns its key."""
    assert type(sample) is dict
    assert list(sample) == ["image", "label", *names, "key"]
    want = expected[sample["key"]]
    for name in names:
        assert same_value(sample[name], want[name]), (sample["key"], name)
    assert isinstance(sample["image"], torch.Tensor) and sample["image"].shape == (3, 8, 8)
    return str(sample["key"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_map_style_returns_every_field_as_packed(packed: dict[str, tuple[Path, Expected]],
                                                 fmt: str) -> None:
    path, expected = packed[fmt]
    ds = PackedDataset(path, fields="all", with_keys=True)
    assert ds.fields == FIELD_NAMES
    seen = [check_sample(ds[i], expected, FIELD_NAMES) for i in range(len(ds))]
    assert sorted(seen) == sorted(expected)
    batch = ds.__getitems__(list(range(len(ds))))  # the batched path (npy: one gather)
    assert [check_sample(s, expected, FIELD_NAMES) for s in batch] == seen
    first = expected[seen[0]]
    assert first["boxes"] == [] and ds[0]["boxes"].shape == (0,)  # no boxes
    assert any(len(row["caption"] or "") == 10_000 for row in expected.values())
    assert any(row["meta"] is None for row in expected.values())  # missing: None


@pytest.mark.parametrize("fmt", FORMATS)
def test_iterable_returns_every_field_once(packed: dict[str, tuple[Path, Expected]],
                                           fmt: str) -> None:
    path, expected = packed[fmt]
    it = PackedIterableDataset(path, fields=("caption", "boxes"), with_keys=True,
                               partition=PartitionOptions(chunk_size=4, drop_last=False))
    seen = [check_sample(sample, expected, ("caption", "boxes")) for sample in it]
    assert sorted(seen) == sorted(expected)


def test_a_subset_in_the_order_asked(packed: dict[str, tuple[Path, Expected]]) -> None:
    path, expected = packed["lmdb"]
    ds = PackedDataset(path, fields=("meta", "score"))
    sample = ds[2]
    assert list(sample) == ["image", "label", "meta", "score"]
    key = PackedDataset(path, with_keys=True)[2][2]
    assert sample["meta"] == expected[key]["meta"] and sample["score"] == expected[key]["score"]


def test_without_fields_samples_stay_tuples(packed: dict[str, tuple[Path, Expected]]) -> None:
    path, _ = packed["wds"]
    sample = PackedDataset(path)[0]
    assert type(sample) is tuple and len(sample) == 2
    assert type(next(iter(PackedIterableDataset(path, with_keys=True)))) is tuple


def test_unknown_fields_are_refused_naming_the_dataset_fields(
        packed: dict[str, tuple[Path, Expected]], tmp_path: Path) -> None:
    path, _ = packed["hdf5"]
    with pytest.raises(ValueError, match=r"no field 'cpation'.*caption, boxes, score"):
        PackedDataset(path, fields=("cpation",))
    with pytest.raises(ValueError, match=r"no field 'x'.*its fields: caption"):
        PackedIterableDataset(path, fields=["x"])
    with pytest.raises(ValueError, match=r"fields=\('caption',\)"):
        PackedDataset(path, fields="caption")
    plain = pack_every_format(tmp_path, 3, (8, 8), 8, 10)["npy"]
    with pytest.raises(ValueError, match="its fields: none"):
        PackedDataset(plain, fields=("caption",))
    assert list(PackedDataset(plain, fields="all")[0]) == ["image", "label"]


def test_raw_and_pil_samples_carry_fields(packed: dict[str, tuple[Path, Expected]]) -> None:
    for fmt in ("npy", "wds"):
        path, expected = packed[fmt]
        for decode in ("raw", "pil"):
            ds = PackedDataset(path, fields=("caption",), with_keys=True, decode=decode)
            for sample in (ds[3], *ds.__getitems__([1, 2])):
                assert sample["caption"] == expected[sample["key"]]["caption"]


def test_default_collate_batches_non_ragged_fields(
        packed: dict[str, tuple[Path, Expected]]) -> None:
    path, expected = packed["npy"]
    ds = PackedDataset(path, fields=("caption", "score", "count"), with_keys=True)
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["caption"] == [expected[k]["caption"] for k in batch["key"]]
    assert batch["score"].dtype == torch.float64 and batch["count"].dtype == torch.int64
    assert batch["count"].tolist() == [expected[k]["count"] for k in batch["key"]]


def check_batch(batch: dict[str, Any], expected: Expected) -> list[str]:
    """A readers.collate batch of boxes and captions: padded, with lengths; its keys."""
    keys = list(batch["key"])
    lengths = batch["boxes_lengths"]
    assert lengths.dtype == torch.int64 and lengths.shape == (len(keys),)
    assert batch["boxes"].shape[:2] == (len(keys), int(lengths.max()))
    for row, key in enumerate(keys):
        want = expected[key]["boxes"]
        n = int(lengths[row])
        assert n == len(want)
        assert not batch["boxes"][row, n:].any()
        if n:
            # promoted to the batch's dtype (float64 when a sample's overflowed float32)
            assert same_value(batch["boxes"][row, :n].to(natural(want).dtype), want)
    assert batch["caption"] == [expected[key]["caption"] for key in keys]
    assert batch["image"].shape == (len(keys), 3, 8, 8)
    return keys


LOADERS = [(0, None), (2, "fork"), (2, "spawn")]


def epoch_batches(path: Path, expected: Expected, workers: int,
                  context: str | None) -> list[list[list[str]]]:
    """The keys of every collated batch of one seeded epoch, iterable then map-style."""
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    it = PackedIterableDataset(path, fields=("caption", "boxes"), with_keys=True, batch_size=4,
                               seed=3, partition=PartitionOptions(chunk_size=3, drop_last=False))
    ds = PackedDataset(path, fields=("caption", "boxes"), with_keys=True, chunk_size=3)
    loaders = (DataLoader(it, batch_size=4, num_workers=workers, collate_fn=collate, **extra),
               DataLoader(ds, batch_size=4, sampler=ChunkSampler(ds, seed=3),
                          num_workers=workers, collate_fn=collate, **extra))
    return [[check_batch(batch, expected) for batch in loader] for loader in loaders]


@pytest.mark.parametrize(("workers", "context"), LOADERS[1:])
@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_loaders_with_workers_give_the_same_batches(packed: dict[str, tuple[Path, Expected]],
                                                    fmt: str, workers: int,
                                                    context: str | None) -> None:
    """2 workers, fork or spawn, against 0: the same epoch, fields padded by collate."""
    path, expected = packed[fmt]
    reference = epoch_batches(path, expected, 0, None)
    for batches in reference:
        assert sorted(k for keys in batches for k in keys) == sorted(expected)
    got = epoch_batches(path, expected, workers, context)
    # the sampler makes the batches: the same ones whoever reads them
    assert got[1] == reference[1]
    # each worker streams its own share: every sample once, in batches checked above
    assert sorted(k for keys in got[0] for k in keys) == sorted(expected)


@pytest.mark.parametrize("fmt", ["wds", "hdf5"])
def test_padding_samples_keep_their_fields(packed: dict[str, tuple[Path, Expected]],
                                           fmt: str) -> None:
    """12 samples over 5 ranks without drop_last: repeats, label PAD_LABEL, same fields."""
    path, expected = packed[fmt]
    for style in ("iterable", "map"):
        samples = []
        for rank in range(5):
            if style == "iterable":
                split = PartitionOptions(rank=rank, world_size=5, drop_last=False, chunk_size=2)
                samples += list(PackedIterableDataset(path, fields="all", with_keys=True,
                                                      partition=split))
            else:
                ds = PackedDataset(path, fields="all", with_keys=True, chunk_size=2)
                sampler = ChunkSampler(ds,
                                       partition=PartitionOptions(rank=rank, world_size=5,
                                                                  drop_last=False))
                samples += ds.__getitems__(list(sampler))
        keys = [check_sample(sample, expected, FIELD_NAMES) for sample in samples]
        real = [key for key, s in zip(keys, samples, strict=True) if s["label"] != PAD_LABEL]
        assert sorted(real) == sorted(expected), style
        assert len(samples) % 5 == 0 and len(samples) > len(real), style


def same_sample(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return list(got) == list(want) and all(
        torch.equal(value, want[name]) if isinstance(value, torch.Tensor)
        else value == want[name] for name, value in got.items())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_resumed_pass_gives_the_same_fields(packed: dict[str, tuple[Path, Expected]],
                                              fmt: str) -> None:
    path, expected = packed[fmt]

    def make() -> PackedIterableDataset:
        it = PackedIterableDataset(path, fields="all", with_keys=True, seed=7,
                                   partition=PartitionOptions(chunk_size=3, buffer_size=5))
        it.set_epoch(2)
        return it

    full = list(make())
    for k in (0, 5, len(full) - 1):
        first = make()
        stream = iter(first)
        before = [next(stream) for _ in range(k)]
        resumed = make()
        resumed.load_state_dict(first.state_dict())
        after = list(resumed)
        assert [s["key"] for s in before + after] == [s["key"] for s in full]
        for got, want in zip(before + after, full, strict=True):
            check_sample(got, expected, FIELD_NAMES)
            assert same_sample(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_url_reads_fields(packed: dict[str, tuple[Path, Expected]], fmt: str,
                            tmp_path: Path) -> None:
    path, expected = packed[fmt]
    url = path.as_uri()
    ds = PackedDataset(url, fields="all", with_keys=True,
                       remote=RemoteOptions(cache_dir=tmp_path / "map"))
    assert sorted(check_sample(ds[i], expected, FIELD_NAMES) for i in range(len(ds))) \
        == sorted(expected)
    it = PackedIterableDataset(url, fields=("boxes",), with_keys=True,
                               remote=RemoteOptions(cache_dir=tmp_path / "it"),
                               partition=PartitionOptions(drop_last=False))
    assert sorted(check_sample(s, expected, ("boxes",)) for s in it) == sorted(expected)


def test_the_chunk_cache_serves_images_and_fields_alike(
        packed: dict[str, tuple[Path, Expected]]) -> None:
    """wds map-style reads through the RAM chunk cache: on or off, the same samples."""
    path, expected = packed["wds"]
    cached = PackedDataset(path, fields="all", with_keys=True, chunk_size=4)
    uncached = PackedDataset(path, fields="all", with_keys=True, chunk_size=4, max_cache_bytes=0)
    order = list(ChunkSampler(cached, seed=1))
    for _ in range(2):  # the second pass is served from the cache
        for got, want in zip(cached.__getitems__(order), uncached.__getitems__(order),
                             strict=True):
            check_sample(got, expected, FIELD_NAMES)
            assert torch.equal(got["image"], want["image"]) and got["key"] == want["key"]
    assert len(cached.handles().cached.cache) > 0
