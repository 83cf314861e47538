"""The fast paths: npy batches in one gather, readers.collate, the cache's locality rule."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from packer.core.index import open_dataset
from readers import PackedDataset, PackedIterableDataset, collate
from readers.batching._shm_pool import worker_pool
from readers.batching.batch import Batch
from readers.ram.chunk_cache import CachedReader
from readers.sampling.sampler import PAD_LABEL, PaddedIndex
from tests.helpers import pack_every_format

NUM = 40
SIZE = (20, 16)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("batch"), NUM, SIZE, 24, 48)


@pytest.mark.parametrize(("context", "workers"), [(None, 0), ("fork", 2), ("spawn", 2)])
def test_collate_gives_the_default_batch_channels_last(packed: dict[str, Path],
                                                       context: str | None,
                                                       workers: int) -> None:
    ds = PackedDataset(packed["npy"], with_keys=True)
    extra = {"multiprocessing_context": context} if workers else {}
    fast = list(DataLoader(ds, batch_size=6, num_workers=workers, collate_fn=collate,
                           **extra))  # type: ignore[arg-type]
    plain = list(DataLoader(ds, batch_size=6))
    assert len(fast) == len(plain)
    for (images, labels, keys), (want, want_labels, want_keys) in zip(fast, plain, strict=True):
        assert images.shape == want.shape == (len(keys), 3, *SIZE)
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(images, want) and torch.equal(labels, want_labels)
        assert keys == want_keys


def _in_a_slot(image: torch.Tensor) -> bool:
    """Whether `image` lies in a buffer of this worker's pool (recycled shared memory)."""
    pool = worker_pool()
    return pool is not None and pool.slot_of(image) is not None


def _collate_noting_shared(batch: Sequence[tuple[torch.Tensor, int]]) -> tuple[bool, list[Any]]:
    """readers.collate, also saying whether the samples were already in shared memory."""
    return _in_a_slot(batch[0][0]), collate(batch)


def _default_noting_shared(batch: Sequence[tuple[torch.Tensor, int]]) -> bool:
    return _in_a_slot(batch[0][0]) or batch[0][0].is_shared()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_gather_into_shared_memory_once_collate_ran(packed: dict[str, Path],
                                                            context: str) -> None:
    ds = PackedDataset(packed["npy"])
    loader = DataLoader(ds, batch_size=4, num_workers=1, collate_fn=_collate_noting_shared,
                        multiprocessing_context=context)
    got = list(loader)
    assert [shared for shared, _ in got] == [False] + [True] * (len(got) - 1)
    want = list(DataLoader(ds, batch_size=4))
    for (_, (images, labels)), (want_images, want_labels) in zip(got, want, strict=True):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)
    plain = DataLoader(ds, batch_size=4, num_workers=1, collate_fn=_default_noting_shared,
                       multiprocessing_context=context)
    assert not any(plain)  # any other collate copies anyway: ordinary memory


@pytest.mark.parametrize(("fmt", "iterable", "workers", "decode"), [
    ("wds", False, 2, "rgb8"), ("npy", False, 2, "rgb8"), ("npy", True, 2, "rgb8"),
    ("npy", False, 2, "raw"), ("npy", False, 0, "raw")])
def test_collate_in_workers_equals_default_collate(packed: dict[str, Path], fmt: str,
                                                   iterable: bool, workers: int,
                                                   decode: str) -> None:
    """Batches go out in recycled shared memory (stacked JPEGs, npy rows in their
    channels-last layout, raw npy rows as one (B, N) tensor); values as default_collate's."""
    size = SIZE if decode == "rgb8" else None
    ds: Any = (PackedIterableDataset(packed[fmt], shuffle=False, with_keys=True)
               if iterable else PackedDataset(packed[fmt], decode=decode,  # type: ignore[arg-type]
                                              size=size, with_keys=True))

    def batches(collate_fn: Any) -> list[Any]:
        return list(DataLoader(ds, batch_size=6, num_workers=workers, collate_fn=collate_fn,
                               persistent_workers=workers > 0))

    for (images, labels, keys), (want, want_labels, want_keys) in zip(
            batches(collate), batches(None), strict=True):
        assert images.shape == want.shape and torch.equal(images, want)
        assert torch.equal(labels, want_labels) and keys == want_keys
        if fmt == "npy" and decode == "rgb8":
            assert images.is_contiguous(memory_format=torch.channels_last)


def test_collate_returns_raw_npy_rows_uncopied(packed: dict[str, Path]) -> None:
    ds = PackedDataset(packed["npy"], decode="raw")
    samples = ds.__getitems__([5, 2, 9])
    rows, labels = collate(samples)
    assert rows.shape == (3, SIZE[0] * SIZE[1] * 3) and rows.dtype == torch.uint8
    assert rows.data_ptr() == samples[0][0].ctypes.data  # the gathered buffer itself
    want = default_collate(samples)
    assert torch.equal(rows, want[0]) and torch.equal(labels, want[1])
    assert collate(samples[::-1])[0].data_ptr() != samples[2][0].ctypes.data  # not in order


def test_collate_falls_back_to_default(packed: dict[str, Path]) -> None:
    ds = PackedDataset(packed["npy"], transform=lambda image: image.contiguous())
    batch = [ds[i] for i in (3, 1, 2)]
    got, want = collate(batch), default_collate(batch)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    samples = ds.__getitems__([4, 5, 6])
    assert torch.equal(collate(samples[::-1])[0], default_collate(samples[::-1])[0])


def test_npy_batches_match_single_reads(packed: dict[str, Path]) -> None:
    ds = PackedDataset(packed["npy"])
    order = [7, 0, 7, NUM - 1, 12]
    batch = ds.__getitems__(order)
    for i, (image, label) in zip(order, batch, strict=True):
        alone = PackedDataset(packed["npy"], decode="pil")[i][0]
        assert torch.equal(image, torch.from_numpy(np.array(alone)).permute(2, 0, 1))
        assert label == int(open_dataset(packed["npy"])[1].labels[i])


def test_npy_raw_is_a_bytes_like_row_that_batches(packed: dict[str, Path]) -> None:
    ds = PackedDataset(packed["npy"], decode="raw")
    it = PackedIterableDataset(packed["npy"], decode="raw", shuffle=False)
    row = ds[5][0]
    assert isinstance(row, np.ndarray) and row.dtype == np.uint8 and row.ndim == 1
    assert len(bytes(row)) == 3 * 20 * 16 and memoryview(row).nbytes == len(row)
    images, _ = next(iter(DataLoader(ds, batch_size=4, num_workers=2)))
    assert images.shape == (4, 3 * 20 * 16)
    assert bytes(images[1].numpy()) == bytes(ds[1][0])
    first, _ = next(iter(DataLoader(it, batch_size=4)))
    assert torch.equal(first, images)


def test_raw_with_size_is_refused(packed: dict[str, Path], fmt: str) -> None:
    for cls in (PackedDataset, PackedIterableDataset):
        with pytest.raises(ValueError, match="cannot resize"):
            cls(packed[fmt], decode="raw", size=(8, 8))


def test_only_tar_shards_use_the_chunk_cache(packed: dict[str, Path], fmt: str) -> None:
    ds = PackedDataset(packed[fmt], max_cache_bytes=1 << 20)
    ds[0]
    handles = ds.handles()
    assert (handles.cached.cache.max_bytes > 0) == (fmt == "wds")


class Counting:
    def __init__(self, n: int) -> None:
        self.records = [bytes([i % 256]) * 10 for i in range(n)]
        self.ranges: list[tuple[int, int]] = []

    def read(self, i: int) -> bytes:
        return self.records[i]

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        return [self.records[i] for i in indices]

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        self.ranges.append((start, stop))
        yield from self.records[start:stop]

    def close(self) -> None:
        pass


def test_random_access_never_reads_whole_chunks() -> None:
    n = 10_000
    reader = Counting(n)
    cached = CachedReader(reader, n, chunk_size=64, cache_bytes=1 << 30)
    rng = np.random.default_rng(0)
    order = rng.permutation(n).tolist()
    for start in range(0, n, 64):
        batch = order[start : start + 64]
        assert cached.read_many(batch) == [reader.records[i] for i in batch]
    # (the old rule read 157 of 157 chunks whole; a rare cluster still may be)
    assert len(reader.ranges) < 16, "scattered reads should stay scattered"
    local = CachedReader(reader, n, chunk_size=64, cache_bytes=1 << 30)
    reader.ranges.clear()
    for start in range(0, 640, 4):  # a local sampler: chunk by chunk, a few at a time
        local.read_many([start + 3, start, start + 2, start + 1])
    assert reader.ranges == [(64 * c, 64 * c + 64) for c in range(10)]


@pytest.mark.parametrize("decode", ["rgb8", "raw"])
def test_collate_without_a_pool_copies_npy_batches_into_shared_memory_once(
        packed: dict[str, Path], decode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another sharing strategy (no recycling): the gathered batch is copied into shared
    memory once, its layout kept. The forked workers inherit the patch."""
    import readers.batching.collate

    monkeypatch.setattr(readers.batching.collate, "worker_pool", lambda: None)
    ds = PackedDataset(packed["npy"], decode=decode)  # type: ignore[arg-type]
    fast = list(DataLoader(ds, batch_size=6, num_workers=2, collate_fn=collate,
                           multiprocessing_context="fork"))
    plain = list(DataLoader(ds, batch_size=6))
    for (images, labels), (want, want_labels) in zip(fast, plain, strict=True):
        assert torch.equal(images, want) and torch.equal(labels, want_labels)
        if decode == "rgb8":
            assert images.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("decode", ["rgb8", "raw"])
def test_an_npy_batch_is_its_samples_as_a_sequence(packed: dict[str, Path], decode: str) -> None:
    """The one-buffer batch reads, slices and pickles as the samples ds[i] gives; a
    padding repeat has PAD_LABEL; collate returns its buffer uncopied."""
    ds = PackedDataset(packed["npy"], decode=decode, with_keys=True)  # type: ignore[arg-type]
    order: list[int] = [3, PaddedIndex(3), 0, NUM - 1]
    batch = ds.__getitems__(order)
    assert isinstance(batch, Batch) and batch.rows is not None
    singles = [ds[int(i)] for i in order]
    for got in (list(batch), batch[:], pickle.loads(pickle.dumps(batch))):
        assert len(got) == len(order)
        for position, sample, single in zip(order, got, singles, strict=True):
            assert bytes(np.asarray(sample[0])) == bytes(np.asarray(single[0]))
            assert sample[2] == single[2]
            assert sample[1] == (PAD_LABEL if isinstance(position, PaddedIndex) else single[1])
    images, labels, keys = collate(batch)
    assert images.data_ptr() == batch.rows.data_ptr()
    want = default_collate(list(batch))
    assert torch.equal(images, want[0]) and torch.equal(labels, want[1]) and keys == want[2]
    assert labels.tolist()[1] == PAD_LABEL
