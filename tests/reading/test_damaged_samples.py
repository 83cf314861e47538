"""One damaged sample costs one sample: the readers refuse it alone, by name, or skip it.

Every format gets one byte flipped in the middle of one sample's stored data (a wds
member, an LMDB value, the HDF5 blob, an npy row). By default the error names the
damaged sample (index and key), its file and where in it, and the other samples, those
of its chunk included, read as they were. With on_error="skip", with 0 and 2 workers,
every other sample is read exactly once, the damaged one's place holds one flagged pad
(the batch count unchanged), and it is logged and counted.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import h5py
import pytest
from torch.utils.data import DataLoader

from packer.core.index import open_dataset
from packer.errors import CorruptDatasetError, DecodeError
from packer.formats.base import ShardOptions
from readers import LoaderMonitor, OnError, PackedDataset, PackedIterableDataset, collate
from readers.options import PartitionOptions
from readers.sampling.sampler import PAD_LABEL
from tests.helpers import FORMATS, pack_every_format, pack_with_fields

COUNT = 40
DAMAGED = 13  # inside the first chunk (64 samples), between good ones
DATA = {"wds": None, "lmdb": "data.lmdb/data.mdb", "hdf5": "data.h5", "npy": "images.npy"}
Raw = dict[str, tuple[bytes, int]]  # key -> (stored bytes, label)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("damaged"), COUNT, (16, 16), 32, 48)


def read_raw(ds: PackedDataset, indices: range) -> list[tuple[bytes, int, str]]:
    return [(bytes(data), int(label), str(key)) for data, label, key in
            (ds[i] for i in indices)]


@pytest.fixture(scope="module")
def originals(packed: dict[str, Path]) -> dict[str, list[tuple[bytes, int, str]]]:
    out = {}
    for fmt, folder in packed.items():
        ds = PackedDataset(folder, decode="raw", with_keys=True, max_cache_bytes=0)
        out[fmt] = read_raw(ds, range(COUNT))
        ds.close()
    return out


def damaged_copy(packed: dict[str, Path], fmt: str, stored: bytes, tmp_path: Path
                 ) -> tuple[Path, Path, int]:
    """A copy of `fmt` with one byte flipped in the middle of sample DAMAGED's data;
    (folder, the damaged file, the flipped byte's offset)."""
    folder = Path(shutil.copytree(packed[fmt], tmp_path / fmt))
    index, table = open_dataset(folder)
    name = DATA[fmt] or index.shards[index.shard_of(DAMAGED)].name
    path = folder / name
    data = bytearray(path.read_bytes())
    start = int(table.offsets[DAMAGED])
    if fmt == "lmdb":  # the value's place in the file
        start = bytes(data).find(stored)
    elif fmt == "hdf5":
        with h5py.File(path, "r") as h5:
            start += int(h5["images"].id.get_offset())
    elif fmt == "npy":
        start = len(data) - (COUNT - DAMAGED) * len(stored)
    assert bytes(data[start : start + len(stored)]) == stored, "the sample's bytes are here"
    offset = start + len(stored) // 2
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    return folder, path, offset


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_damaged_sample_is_refused_alone_and_named(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        fmt: str, tmp_path: Path) -> None:
    want = originals[fmt]
    folder, path, _ = damaged_copy(packed, fmt, want[DAMAGED][0], tmp_path)
    ds = PackedDataset(folder, decode="raw", with_keys=True)  # wds: through the chunk cache
    for i in range(COUNT):  # in order: the chunk cache reads the chunk whole
        if i == DAMAGED:
            with pytest.raises(CorruptDatasetError) as caught:
                ds[i]
            message = str(caught.value)
            assert f"sample {DAMAGED} ({want[DAMAGED][2]!r})" in message
            assert path.name in message
            if fmt != "lmdb":  # LMDB places values itself: the key locates it
                assert "bytes " in message
        else:
            assert read_raw(ds, range(i, i + 1))[0] == want[i], f"sample {i}"
    with pytest.raises(CorruptDatasetError, match=f"sample {DAMAGED} "):
        ds.__getitems__(list(range(8, 24)))
    ds.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_stops_at_the_damaged_sample_by_default(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        fmt: str, tmp_path: Path) -> None:
    folder, path, _ = damaged_copy(packed, fmt, originals[fmt][DAMAGED][0], tmp_path)
    stream = PackedIterableDataset(folder, shuffle=False, decode="raw",
                                   partition=PartitionOptions(rank=0, world_size=1))
    with pytest.raises(CorruptDatasetError, match=f"{path.name}: sample {DAMAGED} "):
        list(stream)
    stream.close()


def skipping_loader(ds: object, workers: int, context: str = "fork") -> DataLoader[object]:
    return DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=collate,  # type: ignore[arg-type]
                      multiprocessing_context=context if workers else None)


def epoch(loader: Iterable[Any]) -> tuple[list[str], int, int]:
    """(keys of the real samples, pads, batches) of one pass of `loader`."""
    keys, pads, batches = [], 0, 0
    for _, labels, batch_keys in loader:
        batches += 1
        for label, key in zip(labels.tolist(), batch_keys, strict=True):
            if label >= 0:
                keys.append(key)
            else:
                pads += 1
    return keys, pads, batches


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["map", "stream"])
def test_skip_reads_every_other_sample_once_and_reports_the_damaged_one(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        fmt: str, kind: str, workers: int, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    want = originals[fmt]
    folder, path, _ = damaged_copy(packed, fmt, want[DAMAGED][0], tmp_path)
    ds: PackedDataset | PackedIterableDataset
    if kind == "map":
        ds = PackedDataset(folder, decode="raw", with_keys=True, on_error="skip")
    else:
        ds = PackedIterableDataset(folder, shuffle=True, decode="raw", with_keys=True,
                                   partition=PartitionOptions(rank=0, world_size=1, buffer_size=8),
                                   batch_size=4, on_error="skip")
    monitor = LoaderMonitor(skipping_loader(ds, workers))
    with caplog.at_level(logging.WARNING, logger="readers"):
        keys, pads, batches = epoch(monitor)
    assert sorted(keys) == sorted(key for _, _, key in want if key != want[DAMAGED][2])
    assert (pads, batches) == (1, COUNT // 4)  # the damaged sample's place: one flagged pad
    assert ds.num_skipped == 1  # counted, also when a worker skipped it
    assert monitor.stats()["skipped"] == 1 and "skipped 1 damaged" in monitor.line()
    if workers == 0:
        [record] = [r for r in caplog.records if r.name == "readers"]
        assert f"sample {DAMAGED} ({want[DAMAGED][2]!r})" in record.getMessage()
        assert path.name in record.getMessage()
    ds.close()


def test_past_max_skipped_the_next_damaged_sample_raises(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        tmp_path: Path) -> None:
    folder, _, _ = damaged_copy(packed, "wds", originals["wds"][DAMAGED][0], tmp_path)
    ds = PackedDataset(folder, decode="raw", on_error=OnError("skip", max_skipped=0))
    assert ds[DAMAGED - 1][1] >= 0
    with pytest.raises(CorruptDatasetError, match="max_skipped=0"):
        ds[DAMAGED]
    with pytest.raises(ValueError, match="'raise' or 'skip'"):
        PackedDataset(folder, on_error="ignore")


def test_an_undecodable_sample_is_skipped_like_a_damaged_one(
        packed: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    ds = PackedDataset(packed["wds"], on_error="skip")
    real = ds.make_sample

    def make(table: Any, i: int, data: bytes, *args: Any, **kwargs: Any) -> Any:
        if i == DAMAGED:
            raise DecodeError(f"cannot decode image ({len(data)} bytes)")
        return real(table, i, data, *args, **kwargs)

    monkeypatch.setattr(ds, "make_sample", make)
    image, label = ds[DAMAGED]
    assert label == PAD_LABEL and image.shape == ds[DAMAGED + 1][0].shape
    assert ds.num_skipped == 1
    ds.close()


@pytest.mark.spawn
def test_spawned_workers_count_their_skips(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        tmp_path: Path) -> None:
    folder, _, _ = damaged_copy(packed, "lmdb", originals["lmdb"][DAMAGED][0], tmp_path)
    ds = PackedDataset(folder, decode="raw", with_keys=True, on_error="skip")
    keys, pads, _ = epoch(skipping_loader(ds, 2, "spawn"))
    assert (len(set(keys)), len(keys), pads, ds.num_skipped) == (COUNT - 1, COUNT - 1, 1, 1)
    ds.close()


@pytest.mark.parametrize("held", [False, True], ids=["fields-read", "fields-in-memory"])
@pytest.mark.parametrize("kind", ["map", "stream"])
def test_a_sample_whose_fields_are_damaged_is_skipped_with_its_fields(
        kind: str, held: bool, tmp_path: Path) -> None:
    folder, expected = pack_with_fields(tmp_path, "wds", shards=ShardOptions(max_samples=4))
    index, table = open_dataset(folder)
    assert table.fields is not None
    offset, size = table.fields.location(5)
    path = folder / index.shards[index.shard_of(5)].name
    data = bytearray(path.read_bytes())
    caption = bytes(data[offset : offset + size]).find(b"a dog")  # a member's data
    assert expected["img005"]["caption"] == "a dog" and caption >= 0
    data[offset + caption + 2] ^= 0x01
    path.write_bytes(bytes(data))
    ds: PackedDataset | PackedIterableDataset
    if kind == "map":
        with pytest.raises(CorruptDatasetError, match=r"fields of sample 5 \('img005'\)"):
            PackedDataset(folder, fields="all", fields_in_memory=held)[5]
        ds = PackedDataset(folder, with_keys=True, fields="all", on_error="skip",
                           fields_in_memory=held)
        samples = [ds[i] for i in range(len(ds))]
    else:
        ds = PackedIterableDataset(folder, shuffle=False, with_keys=True, fields="all",
                                   partition=PartitionOptions(rank=0, world_size=1),
                                   on_error="skip", fields_in_memory=held)
        samples = list(ds)
    real = [s for s in samples if s["label"] >= 0]
    assert sorted(s["key"] for s in real) == sorted(k for k in expected if k != "img005")
    assert all(s["caption"] == expected[s["key"]]["caption"] for s in samples)  # pads too
    assert (len(samples), ds.num_skipped) == (len(expected), 1)
    ds.close()


def test_a_skip_leaves_the_ranks_even(
        packed: dict[str, Path], originals: dict[str, list[tuple[bytes, int, str]]],
        tmp_path: Path) -> None:
    want = originals["hdf5"]
    folder, _, _ = damaged_copy(packed, "hdf5", want[DAMAGED][0], tmp_path)
    ranks = [PackedIterableDataset(folder, seed=3, decode="raw", with_keys=True,
                                   on_error="skip", partition=PartitionOptions(
                                       rank=rank, world_size=2, chunk_size=4, buffer_size=8))
             for rank in (0, 1)]
    streams = [list(rank) for rank in ranks]
    assert len(streams[0]) == len(streams[1]) == len(ranks[0]) == len(ranks[1])
    real = [str(key) for stream in streams for _, label, key in stream if label >= 0]
    assert sorted(real) == sorted(key for _, _, key in want if key != want[DAMAGED][2])
    assert sum(rank.num_skipped for rank in ranks) == 1
