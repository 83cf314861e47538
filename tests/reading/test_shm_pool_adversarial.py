"""Adversarial checks of the recycled shared memory (readers.batching._shm_pool), in DataLoaders.

Each test holds batches, or only views of them, while the DataLoader keeps going long
enough for the workers' buffers to be reused (checked: a test that never saw a reuse
would prove nothing), then compares what it held against a plain main-process read.
A finalizer that fired too early, a slot marked free twice or a buffer handed out while
still in use shows up as changed pixels.

What a worker does with its slots (samples it keeps, threads, sample structure,
single-sample reads) is pinned in tests/reading/test_shm_pool_workers.py; hand-offs between the
main process, the collector and forks in tests/reading/test_shm_pool_handoffs.py.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, collate
from readers.batching import _shm_pool as shm_pool
from readers.batching._shm_pool import BUSY, FREE, SlotPool
from readers.options import PartitionOptions
from tests import shm_pool_support as support


def _slot_collate(batch: Sequence[tuple[Any, ...]]) -> tuple[Any, list[Any]]:
    """readers.collate, plus (worker pid, pool slot) of the batch (slot None: not pooled)."""
    out = collate(batch)
    pool = shm_pool._POOL
    return (os.getpid(), pool.slot_of(out[0]) if pool is not None else None), out


def _batches(loader: DataLoader[Any], slots: list[Any]) -> Iterator[list[Any]]:
    for slot, out in loader:
        slots.append(slot)
        yield out


def _assert_reused(slots: list[Any]) -> None:
    pooled = [slot for slot in slots if slot[1] is not None]
    assert len(pooled) > len(set(pooled)), "no buffer was ever reused: the test proves nothing"


def _assert_images(images: Any, keys: Sequence[str], pool_want: dict[str, torch.Tensor]) -> None:
    for image, key in zip(torch.as_tensor(images), keys, strict=True):
        assert torch.equal(image, pool_want[key]), f"the image of {key} changed"


def _loader(path: Path, **kwargs: Any) -> DataLoader[Any]:
    options: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "shuffle": True,
                               "collate_fn": _slot_collate, "multiprocessing_context": "fork"}
    options.update(kwargs)
    return DataLoader(PackedDataset(path, with_keys=True), **options)


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """For the test's length, gc's collections skip every object made before it (moved to
    the permanent generation): a gc.collect() per batch then costs what the test made,
    not what the tests before it left in the session."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("frozen_heap")
def test_views_outlive_their_batch(pool_packed: dict[str, Path],
                                   pool_want: dict[str, torch.Tensor]) -> None:
    """Only a view, a numpy array, a storage or a DLPack tensor of each batch is kept."""
    views = [
        lambda images: images[1:3],
        lambda images: images.permute(0, 2, 3, 1),
        lambda images: images.numpy(),
        lambda images: memoryview(images.numpy()),
        lambda images: torch.from_numpy(images.numpy()),
        lambda images: torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(images)),
        lambda images: images.untyped_storage(),
        lambda images: images.as_subclass(torch.Tensor),
    ]
    slots: list[Any] = []
    loader = _loader(pool_packed["npy"], persistent_workers=True)
    held = []
    for _epoch in range(4):
        for n, (images, _, keys) in enumerate(_batches(loader, slots)):
            if n % 3 == 0:  # the others are dropped, so that their buffers come back
                k = len(held) % len(views)
                held.append((k, views[k](images), images.clone(), keys))
            del images
            gc.collect()
    _assert_reused(slots)
    for k, view, copy, keys in held:
        expected = views[k](copy)
        assert np.array_equal(np.asarray(view), np.asarray(expected)), f"view {k} changed"
        _assert_images(copy, keys, pool_want)


def test_early_breaks_new_iterators_and_deep_prefetch(pool_packed: dict[str, Path],
                                                      pool_want: dict[str, torch.Tensor]) -> None:
    slots: list[Any] = []
    loader = _loader(pool_packed["npy"], persistent_workers=True, prefetch_factor=6)
    held = []
    for epoch in range(8):
        for k, (images, _, keys) in enumerate(_batches(loader, slots)):
            _assert_images(images, keys, pool_want)
            if k % 3 == 1:
                held.append((images, keys))
            if k == 2 + epoch % 4:  # abandon the pass: prefetched batches are drained
                break
    _assert_reused(slots)
    for images, keys in held:
        _assert_images(images, keys, pool_want)


def test_short_last_batches_two_loaders_and_restarted_workers(
        pool_packed: dict[str, Path], pool_want: dict[str, torch.Tensor]) -> None:
    """A persistent loader with a short last batch beside one that forks new workers each
    pass, while the main process holds batches of workers that already exited."""
    slots: list[Any] = []
    steady = _loader(pool_packed["npy"], batch_size=5, drop_last=False, persistent_workers=True)
    restarted = _loader(pool_packed["npy"], num_workers=1)
    held = []
    for _epoch in range(4):
        pairs = zip(_batches(steady, slots), _batches(restarted, slots), strict=False)
        for k, ((images, _, keys), (other, _, other_keys)) in enumerate(pairs):
            _assert_images(images, keys, pool_want)
            _assert_images(other, other_keys, pool_want)
            if len(keys) < 5 or k % 4 == 0:
                held.append((images, keys))
            if k % 4 == 1:
                held.append((other, other_keys))
    _assert_reused(slots)
    for images, keys in held:
        _assert_images(images, keys, pool_want)


def test_chunk_sampler_with_padding(pool_packed: dict[str, Path],
                                    pool_want: dict[str, torch.Tensor]) -> None:
    dataset = PackedDataset(pool_packed["npy"], with_keys=True)
    sampler = ChunkSampler(dataset,
                           partition=PartitionOptions(drop_last=False, rank=1, world_size=5,
                                                      buffer_size=8))
    loader = DataLoader(dataset, batch_size=3, num_workers=2, sampler=sampler,
                        collate_fn=_slot_collate, persistent_workers=True,
                        multiprocessing_context="fork")
    slots: list[Any] = []
    held = []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        for k, (images, labels, keys) in enumerate(_batches(loader, slots)):
            _assert_images(images, keys, pool_want)
            if k % 2 == 0:
                held.append((images, keys))
            assert labels.shape == (len(keys),)
    _assert_reused(slots)
    for images, keys in held:
        _assert_images(images, keys, pool_want)


def test_a_full_pool_mixes_fresh_and_recycled_buffers_correctly(
        pool_packed: dict[str, Path], pool_want: dict[str, torch.Tensor],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots a worker (the forked workers inherit the patch) and 12 batches in flight."""
    monkeypatch.setattr(shm_pool, "POOL_BYTES", 1)
    slots: list[Any] = []
    loader = _loader(pool_packed["npy"], persistent_workers=True, prefetch_factor=6)
    held = []
    for _epoch in range(4):
        for k, (images, _, keys) in enumerate(_batches(loader, slots)):
            _assert_images(images, keys, pool_want)
            if k % 5 == 0:
                held.append((images, keys))
    _assert_reused(slots)
    assert any(slot[1] is None for slot in slots), "the pool never ran full"
    assert {slot[1] for slot in slots} <= {None, 0, 1}
    for images, keys in held:
        _assert_images(images, keys, pool_want)


def test_iterable_dataset_batches_stay_put(pool_packed: dict[str, Path]) -> None:
    """Decoded JPEGs stacked by collate into recycled buffers (wds, PackedIterableDataset)."""
    pool_want = support.read_by_key(pool_packed["wds"])
    dataset = PackedIterableDataset(pool_packed["wds"], with_keys=True)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_slot_collate,
                        persistent_workers=True, multiprocessing_context="fork")
    slots: list[Any] = []
    held = []
    for epoch in range(4):
        dataset.set_epoch(epoch)
        for k, (images, _, keys) in enumerate(_batches(loader, slots)):
            if k % 3 == 0:
                held.append((images, keys))
    _assert_reused(slots)
    for images, keys in held:
        assert images.shape == (len(keys), 3, *support.SIZE)
        _assert_images(images, keys, pool_want)


def test_a_reference_held_only_in_cpp_keeps_the_slot_busy() -> None:
    """A DLPack capsule and a tensor built from one hold the storage without any Python
    tensor of it: the slot must stay busy until they are gone."""
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    received = support.received(batch)
    capsule = torch.utils.dlpack.to_dlpack(received[0][1])
    del received
    gc.collect()
    assert pool.state[slot] == BUSY
    rebuilt = torch.utils.dlpack.from_dlpack(capsule)
    del capsule
    gc.collect()
    assert pool.state[slot] == BUSY
    del rebuilt
    gc.collect()
    assert pool.state[slot] == FREE


def test_a_batch_dropped_in_another_thread_frees_its_slot() -> None:
    """The pin-memory thread unpickles batches; the training thread drops them."""
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    data = support.pickled_for_another_process(batch)
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(pickle.loads(data)))
    thread.start()
    thread.join()
    assert pool.state[slot] == BUSY
    box.clear()
    gc.collect()
    assert pool.state[slot] == FREE
