"""Raw batches in recycled shared memory: a buffer is never reused while a batch views
it, and a batch's fields cross beside it as the per-sample path gives them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from readers import PackedDataset, PackedIterableDataset, RawBatch, collate
from readers.batching import _shm_pool as shm_pool
from tests.helpers import pack_wds, pack_with_fields

BATCH = 4


@pytest.fixture(scope="module")
def wds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("rawpool"), 36, 10, 16, 64)


def _collate_with_slot(batch: Sequence[Any]) -> tuple[int | None, Any]:
    """readers.collate, plus the pool slot the batch left in (None: not recycled)."""
    out = collate(batch)
    pool = shm_pool._POOL
    return (pool.slot_of(out[0].buffer) if pool is not None else None), out


def _bytes(raw: RawBatch) -> list[bytes]:
    return [bytes(sample) for sample in raw]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_held_raw_batches_never_change_and_dropped_ones_are_recycled(wds: Path,
                                                                     context: str) -> None:
    ds = PackedDataset(wds, decode="raw")
    want = [_bytes(raw) for raw, _ in DataLoader(ds, batch_size=BATCH, collate_fn=collate)]
    loader = DataLoader(ds, batch_size=BATCH, num_workers=1, collate_fn=_collate_with_slot,
                        persistent_workers=True, multiprocessing_context=context)
    held: list[tuple[int, RawBatch]] = []
    slots: list[int | None] = []
    for _epoch in range(3):
        for k, (slot, (raw, _labels)) in enumerate(loader):
            slots.append(slot)
            assert _bytes(raw) == want[k]
            if k % 3 == 0:  # keep a third of the batches: their buffers must stay theirs
                held.append((k, raw))
    recycled = [slot for slot in slots if slot is not None]
    assert len(recycled) > len(set(recycled)), "no buffer was ever reused"
    for k, raw in held:
        assert _bytes(raw) == want[k]


def test_a_slot_too_small_for_a_batch_makes_room_for_a_larger_one() -> None:
    pool = shm_pool.SlotPool()
    small = pool.take_bytes(100)
    slot = pool.slot_of(small)
    assert slot is not None and small.numel() == 100
    del small  # idle and free: a larger batch takes its place
    large = pool.take_bytes(1 << 20)
    assert pool.slot_of(large) == slot and large.numel() == 1 << 20
    held = pool.take_bytes(10)  # `large` is held: a new slot
    assert pool.slot_of(held) not in (None, slot)


def _same(got: Any, want: Any) -> None:
    """Equal batched values: tensors, RawBatches (their bytes), lists, dicts."""
    if isinstance(want, dict):
        assert list(got) == list(want)
        for name in want:
            _same(got[name], want[name])
    elif isinstance(want, RawBatch):
        assert isinstance(got, RawBatch) and _bytes(got) == _bytes(want)
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype
        assert torch.equal(got, want)
    else:
        assert got == want and type(got) is type(want)


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5"])
@pytest.mark.parametrize("iterable", [False, True])
@pytest.mark.parametrize(("context", "workers"), [(None, 0), ("fork", 2), ("spawn", 2)])
def test_raw_batches_with_fields_equal_the_per_sample_path(
        tmp_path_factory: pytest.TempPathFactory, fmt: str, iterable: bool,
        context: str | None, workers: int) -> None:
    path, _ = _fields_dataset(tmp_path_factory, fmt)
    ds: Any = PackedIterableDataset(path, decode="raw", shuffle=False, fields="all",
                                    with_keys=True) if iterable else \
        PackedDataset(path, decode="raw", fields="all", with_keys=True)
    per_sample = PackedDataset(path, decode="raw", fields="all", with_keys=True)
    by_key = {per_sample[i]["key"]: i for i in range(len(per_sample))}
    extra = {"multiprocessing_context": context} if workers else {}
    count = 0
    for batch in DataLoader(ds, batch_size=BATCH, num_workers=workers, collate_fn=collate,
                            **extra):  # type: ignore[arg-type]
        assert isinstance(batch["image"], RawBatch) and type(batch) is dict
        want = collate([per_sample[by_key[key]] for key in batch["key"]])
        _same(batch, want)
        count += len(batch["key"])
    assert count == len(per_sample)


_FIELD_SETS: dict[str, tuple[Path, Any]] = {}


def _fields_dataset(factory: pytest.TempPathFactory, fmt: str) -> tuple[Path, Any]:
    """One packed field dataset per format for the whole module."""
    if fmt not in _FIELD_SETS:
        _FIELD_SETS[fmt] = pack_with_fields(factory.mktemp(f"rawfields-{fmt}"), fmt)
    return _FIELD_SETS[fmt]
