"""Raw batches as one buffer (readers.batching.raw_batch): round trips through a
DataLoader in every format and both readers, and the RawBatch object itself."""

from __future__ import annotations

import collections.abc
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.pin_memory import pin_memory

from packer.core.checks import digest_of
from packer.core.index import open_dataset
from readers import PackedDataset, PackedIterableDataset, RawBatch, collate
from readers.batching._columns import PackedColumn, packed, unpacked
from tests.helpers import pack_every_format

NUM = 30
BATCH = 4
LOADERS = [(None, 0), ("fork", 2), ("spawn", 2)]


@pytest.fixture(scope="module")
def packed_sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("raw"), NUM, (12, 10), 16, 40)


def _stored(path: Path) -> dict[str, tuple[bytes, int, int]]:
    """key -> (stored bytes, label, index), the bytes checked against the table's digest."""
    _, table = open_dataset(path)
    ds = PackedDataset(path, decode="raw")
    out = {}
    for i in range(len(ds)):
        data = bytes(ds[i][0])
        assert digest_of(data) == bytes(table.digests[i])
        out[table.key(i)] = (data, int(table.labels[i]), i)
    return out


def _loader(ds: Any, context: str | None, workers: int) -> DataLoader[Any]:
    extra = {"multiprocessing_context": context} if workers else {}
    return DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=collate,
                      **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5"])
@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize(("context", "workers"), LOADERS)
def test_raw_batches_round_trip(packed_sets: dict[str, Path], fmt: str, iterable: bool,
                                context: str | None, workers: int) -> None:
    path = packed_sets[fmt]
    stored = _stored(path)
    ds: Any = PackedIterableDataset(path, decode="raw", shuffle=False, with_keys=True) \
        if iterable else PackedDataset(path, decode="raw", with_keys=True)
    seen: list[str] = []
    _, table = open_dataset(path)
    for raw, labels, keys in _loader(ds, context, workers):
        assert isinstance(raw, RawBatch) and len(raw) == len(keys) == len(labels)
        assert raw.offsets[0] == 0 and int(raw.offsets[-1]) == raw.data.numel()
        for k, (data, key) in enumerate(zip(raw, keys, strict=True)):
            want, label, index = stored[key]
            assert data == want and bytes(raw.sample(k)) == want
            assert digest_of(data) == bytes(table.digests[index])
            assert int(labels[k]) == label
        indices = raw.indices
        if iterable:
            assert indices is None  # the streaming reader gives none
        else:
            assert indices is not None
            assert indices.tolist() == [stored[key][2] for key in keys]
        seen.extend(keys)
    if iterable and workers:  # workers interleave their chunks: each sample once
        assert sorted(seen) == sorted(stored)
    else:
        assert seen == [table.key(i) for i in range(NUM)]


@pytest.mark.parametrize(("context", "workers"), LOADERS)
def test_raw_npy_rows_stay_one_tensor(packed_sets: dict[str, Path], context: str | None,
                                      workers: int) -> None:
    stored = _stored(packed_sets["npy"])
    ds = PackedDataset(packed_sets["npy"], decode="raw", with_keys=True)
    for rows, labels, keys in _loader(ds, context, workers):
        assert isinstance(rows, torch.Tensor) and rows.shape == (len(keys), 12 * 10 * 3)
        for row, label, key in zip(rows, labels.tolist(), keys, strict=True):
            assert row.numpy().tobytes() == stored[key][0] and label == stored[key][1]


def test_default_collate_still_gives_the_bytes_objects(packed_sets: dict[str, Path]) -> None:
    ds = PackedDataset(packed_sets["wds"], decode="raw")
    datas, labels = next(iter(DataLoader(ds, batch_size=BATCH)))
    assert [type(data) for data in datas] == [bytes] * BATCH
    assert list(datas) == [ds[i][0] for i in range(BATCH)] and labels.shape == (BATCH,)


def _batch(samples: list[bytes], indices: list[int] | None = None) -> RawBatch:
    return RawBatch.of(samples, indices)


def test_raw_batch_gives_each_sample_and_moves_in_one_copy() -> None:
    samples = [b"\xff\xd8abc", b"", b"x" * 1000, bytearray(b"yz")]
    raw = _batch(list(map(bytes, samples)), [7, 0, 3, 9])
    assert len(raw) == 4 and [bytes(s) for s in raw] == [bytes(s) for s in samples]
    assert raw.offsets.tolist() == [0, 5, 5, 1005, 1007] and raw.lengths.tolist() == [5, 0, 1000, 2]
    assert raw.indices is not None and raw.indices.tolist() == [7, 0, 3, 9]
    assert raw[-1] == b"yz" and raw.sample(0)[:2] == b"\xff\xd8"
    with pytest.raises(IndexError):
        raw.sample(4)
    moved = raw.to("cpu")
    assert moved.buffer is raw.buffer or torch.equal(moved.buffer, raw.buffer)
    copied = pickle.loads(pickle.dumps(raw))
    assert [bytes(s) for s in copied] == [bytes(s) for s in samples]
    assert torch.equal(raw.tensor(2), torch.full((1000,), ord("x"), dtype=torch.uint8))
    assert _batch([b"a"]).indices is None and len(_batch([])) == 0


def test_the_pin_memory_thread_calls_the_batch_pin_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch pins a non-Sequence with a pin_memory method by calling it: one copy."""
    raw = _batch([b"ab", b"cd"])
    assert not isinstance(raw, collections.abc.Sequence)
    monkeypatch.setattr(RawBatch, "pin_memory", lambda self, device=None: ("pinned", self))
    out = pin_memory([raw, "label"])
    assert out[0] == ("pinned", raw)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs a CUDA device")
def test_pin_memory_and_to_cuda_keep_the_bytes() -> None:
    raw = _batch([b"abc", b"de"])
    pinned = raw.pin_memory()
    assert pinned.is_pinned() and [bytes(s) for s in pinned] == [b"abc", b"de"]
    on_gpu = pinned.to("cuda", non_blocking=True)
    assert bytes(on_gpu.tensor(1).cpu().numpy()) == b"de"


@pytest.mark.parametrize("values", [
    ["a dog", "", "naïve 日本語 €", "\ud83d", "\ude00x", "x" * 10_000],
    ("class_00/img_1", "class_01/é"), [b"\x00\xff", b"", b"abc"]])
def test_columns_of_text_and_bytes_cross_as_one_buffer(values: Any) -> None:
    column = packed(values)
    assert isinstance(column, PackedColumn) and len(column.offsets) == len(values) + 1
    back = unpacked(pickle.loads(pickle.dumps(column)))
    assert back == values and type(back) is type(values)


@pytest.mark.parametrize("values", [["a", None], [1, 2], [], "text", [b"a", "b"], {"a": 1}])
def test_other_values_are_left_as_they_are(values: Any) -> None:
    assert packed(values) is values and unpacked(values) is values
