"""What a worker does with the recycled shared memory (readers.batching._shm_pool): samples
the worker itself keeps are never overwritten, threads never share a buffer, samples that
are not (image, label) tuples keep their structure, single-sample reads use no slot."""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, TensorDataset, default_collate

from readers import PackedDataset, collate
from readers.batching import _shm_arrivals as arrivals
from readers.batching import _shm_pool as shm_pool
from readers.batching._shm_pool import FREE, SlotPool


class _CachingWrapper(Dataset[Any]):
    """Keeps the samples that PackedDataset.__getitems__ returned, in the worker."""

    def __init__(self, base: PackedDataset) -> None:
        self.base = base
        self.cache: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self.base)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        missing = [i for i in indices if i not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.base.__getitems__(missing), strict=True))
        return [self.cache[i] for i in indices]


def test_samples_the_worker_keeps_are_not_overwritten(pool_packed: dict[str, Path],
                                                      pool_want: dict[str, torch.Tensor]) -> None:
    loader = DataLoader(_CachingWrapper(PackedDataset(pool_packed["npy"], with_keys=True)),
                        batch_size=4, num_workers=1, collate_fn=collate,
                        persistent_workers=True, multiprocessing_context="fork")
    changed = 0
    for _epoch in range(3):  # epochs 2 and 3 come from the worker's cache
        for images, _, keys in loader:
            changed += sum(not torch.equal(image, pool_want[key])
                           for image, key in zip(images, keys, strict=True))
    del loader  # its workers end now, not while a failure is reported
    assert changed == 0, f"{changed} cached images changed"


def test_threads_in_a_worker_never_share_a_buffer() -> None:
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _trial in range(100):
            pool = SlotPool()
            for _ in range(4):
                pool.take((1, 4, 4, 3))
            pool.state[:] = FREE
            taken: list[torch.Tensor] = []  # held: each is in use until dropped
            barrier = threading.Barrier(8)

            def take(pool: SlotPool = pool, taken: list[torch.Tensor] = taken,
                     barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                taken.append(pool.take((1, 4, 4, 3)))

            threads = [threading.Thread(target=take) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            pointers = [tensor.data_ptr() for tensor in taken]
            assert len(pointers) == len(set(pointers)), "one buffer went to two threads"
    finally:
        sys.setswitchinterval(switch)


_Named = collections.namedtuple("_Named", "image label")


class _Samples(Dataset[Any]):
    """Samples of another shape than (image, label): bare tensors, namedtuples."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> Any:
        image = torch.full((3, 4, 4), i, dtype=torch.uint8)
        return image if self.kind == "bare" else _Named(image, i)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
            and torch.equal(a, b)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) \
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("kind", ["one", "bare", "named"])
def test_collate_in_a_worker_keeps_the_batch_structure(kind: str) -> None:
    images = torch.arange(8 * 3 * 4 * 4, dtype=torch.uint8).reshape(8, 3, 4, 4)
    dataset = TensorDataset(images) if kind == "one" else _Samples(kind)
    pool_want = list(DataLoader(dataset, batch_size=4, collate_fn=default_collate))
    got = list(DataLoader(dataset, batch_size=4, num_workers=1, collate_fn=collate,
                          multiprocessing_context="fork"))
    assert all(_same(a, b) for a, b in zip(got, pool_want, strict=True))


def _pool_rows_collate(batch: Sequence[tuple[Any, ...]]) -> tuple[Any, list[Any]]:
    """readers.collate, plus the number of images in each of the worker's pool buffers."""
    out = collate(batch)
    pool = shm_pool._POOL
    return sorted(buffer.shape[0] for buffer in pool.buffers) if pool is not None else [], out


def test_single_sample_reads_do_not_use_up_the_pool(pool_packed: dict[str, Path]) -> None:
    """ConcatDataset has no __getitems__: each sample is read alone through __getitem__.
    The pool should hold the batches collate stacks, not one slot per sample read."""
    dataset = ConcatDataset([PackedDataset(pool_packed["npy"]), PackedDataset(pool_packed["npy"])])
    loader = DataLoader(dataset, batch_size=4, num_workers=1, collate_fn=_pool_rows_collate,
                        multiprocessing_context="fork")
    rows = [rows for rows, _ in loader][-1]
    assert rows and set(rows) == {4}, f"pool buffers of {rows} images"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_slot_hands_its_file_descriptor_over_once(
        pool_packed: dict[str, Path], pool_want: dict[str, torch.Tensor],
        monkeypatch: pytest.MonkeyPatch, context: str) -> None:
    """Batches from a recycled slot cross without a file descriptor after the first: the
    main process keeps the slot's, and each batch still gets storage of its own."""
    handed: list[bool] = []
    arrive = arrivals._slot_images

    def counted(images: shm_pool.SlotImages, *args: Any) -> torch.Tensor:
        handed.append(images.handle is not None)
        return arrive(images, *args)

    monkeypatch.setattr(arrivals, "_slot_images", counted)  # unpickling runs here
    loader = DataLoader(PackedDataset(pool_packed["npy"], with_keys=True), batch_size=2,
                        num_workers=2, collate_fn=collate, persistent_workers=True,
                        multiprocessing_context=context)
    wrong = 0
    for _epoch in range(4):
        for images, _, keys in loader:
            wrong += sum(not torch.equal(image, pool_want[key])
                         for image, key in zip(images, keys, strict=True))
    del loader
    assert wrong == 0
    assert len(handed) >= 8, "the batches did not come from pool slots"
    assert sum(handed) <= 2 * shm_pool.MAX_SLOTS and sum(handed) < len(handed) // 2, handed
