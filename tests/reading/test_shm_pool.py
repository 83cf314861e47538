"""Recycled shared memory for npy batches (readers.batching._shm_pool): reused only once dropped."""

from __future__ import annotations

import gc
import os
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from torch.utils.data import DataLoader

from readers import PackedDataset, collate
from readers.batching import _shm_arrivals as arrivals
from readers.batching import _shm_pool as shm_pool
from readers.batching._shm_pool import BUSY, FREE, SlotPool
from tests import shm_pool_support as support

BATCH = 4


@pytest.fixture(scope="module")
def npy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support.pack_small(tmp_path_factory.mktemp("pool"))["npy"]


def _collate_with_slot(batch: Sequence[tuple[torch.Tensor, int]]) -> tuple[Any, ...]:
    """readers.collate, plus the pool slot the batch left in (None: not recycled)."""
    out = collate(batch)
    pool = shm_pool._POOL
    slot = pool.slot_of(out[0]) if pool is not None else None
    return slot, out


def _expected(path: Path) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(images.contiguous(), labels)
            for images, labels in DataLoader(PackedDataset(path), batch_size=BATCH)]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dropped_batches_are_recycled_and_held_ones_never_change(npy: Path,
                                                                 context: str) -> None:
    want = _expected(npy)
    loader = DataLoader(PackedDataset(npy), batch_size=BATCH, num_workers=1,
                        collate_fn=_collate_with_slot, persistent_workers=True,
                        multiprocessing_context=context)
    held: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    slots: list[int | None] = []
    for _epoch in range(3):
        for k, (slot, (images, labels)) in enumerate(loader):
            slots.append(slot)
            assert torch.equal(images, want[k][0]) and torch.equal(labels, want[k][1])
            if k % 3 == 0:  # keep a third of the batches: their buffers must stay theirs
                held.append((k, images, labels))
    recycled = [slot for slot in slots if slot is not None]
    assert len(recycled) > len(set(recycled)), "no buffer was ever reused"
    for k, images, labels in held:
        assert torch.equal(images, want[k][0]) and torch.equal(labels, want[k][1])


def test_a_worker_that_runs_out_of_slots_sends_fresh_buffers(
        npy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm_pool, "MAX_SLOTS", 3)  # the forked worker inherits it
    want = _expected(npy)
    loader = DataLoader(PackedDataset(npy), batch_size=BATCH, num_workers=1,
                        collate_fn=_collate_with_slot, multiprocessing_context="fork")
    held = list(loader)  # every batch kept: the pool fills, then fresh buffers
    assert [slot for slot, _ in held] == [0, 1, 2] + [None] * (len(held) - 3)
    for (_, (images, labels)), (want_images, want_labels) in zip(held, want, strict=True):
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def test_the_slot_frees_when_the_last_view_dies_in_the_receiving_process() -> None:
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    received = support.received(batch)
    assert type(received) is list and received[1].tolist() == [0, 1]
    view = received[0][1]
    del received
    gc.collect()
    assert pool.state[slot] == BUSY  # a view still holds the storage
    del view
    gc.collect()
    assert pool.state[slot] == FREE
    pointer = batch.images.data_ptr()
    assert pool.take((2, 3, 4, 4)).data_ptr() != pointer  # the worker still holds it
    del batch
    assert pool.take((2, 3, 4, 4)).data_ptr() == pointer


def test_a_batch_held_across_a_fork_gives_up_its_slot() -> None:
    """The child maps it too and may read it after the receiver dropped it: never reuse
    that slot."""
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    pointer = batch.images.data_ptr()
    received = support.received(batch)
    del batch
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert pool.state[slot] == shm_pool.GONE
    del received
    gc.collect()
    assert pool.state[slot] == shm_pool.GONE  # the finalizer was detached
    again = pool.take((2, 3, 4, 4))
    assert again.data_ptr() != pointer and pool.slot_of(again) == slot  # a new buffer


def test_a_batch_pickled_for_another_process_leaves_the_slot_free_and_unchanged() -> None:
    """torch moves a tensor it pickles (a multiprocessing queue, a Process argument) into
    shared memory of its own: the batch stops viewing the slot, which the worker may then
    reuse without touching what the other process reads."""
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    batch.images.copy_(torch.arange(96, dtype=torch.uint8).view(2, 3, 4, 4))
    received = support.received(batch)
    del batch
    pickled = support.pickled_for_another_process(received[0][1:])
    gc.collect()
    assert pool.state[slot] == FREE  # nothing here views the slot any more
    expected = torch.arange(48, 96, dtype=torch.uint8).view(1, 3, 4, 4)
    assert torch.equal(received[0][1:], expected)
    reused = pool.take((2, 3, 4, 4))
    assert pool.slot_of(reused) == slot
    reused.fill_(255)
    assert torch.equal(pickle.loads(pickled), expected)
    assert torch.equal(received[0][1:], expected)


def test_a_batch_changed_in_the_worker_is_never_recycled() -> None:
    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    batch[0] = batch[0][:1]  # a view of the slot, no longer the tracked tensor
    received = support.received(batch)
    assert received[0].shape == (1, 3, 4, 4)
    del received
    gc.collect()
    assert pool.state[slot] == BUSY


def test_the_state_array_travels_once_and_is_found_again() -> None:
    pool = SlotPool()
    first, first_slot = support.sent(pool, (1, 3, 2, 2))
    second, second_slot = support.sent(pool, (1, 3, 2, 2))
    one, two = (support.received(batch) for batch in (first, second))
    assert second.__reduce__()[1][4] is None  # no second copy of the state array
    del one, two
    gc.collect()
    assert pool.state[first_slot] == pool.state[second_slot] == FREE


def test_other_sharing_strategies_turn_recycling_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.multiprocessing, "get_sharing_strategy", lambda: "file_system")
    assert shm_pool.worker_pool() is None


def test_pool_size_is_bounded_by_bytes() -> None:
    pool = SlotPool()
    big = (shm_pool.POOL_BYTES // 3) + 1
    held = [pool.take((big,)) for _ in range(5)]  # untouched: no memory used
    assert len(pool.buffers) == shm_pool.MIN_SLOTS
    assert [pool.slot_of(tensor) for tensor in held] == [0, 1, None, None, None]


def _lasting_descriptors() -> int:
    """Open descriptors once the ended workers' pipes are closed: the DataLoader and
    multiprocessing close some a moment after the loop, so count until two reads agree."""
    count = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        time.sleep(0.02)
        again, count = count, len(os.listdir("/proc/self/fd"))
        if again == count:
            break
    return count


def test_open_files_stay_flat_when_each_epoch_starts_new_workers(npy: Path) -> None:
    """Every worker sends its state array once, and each slot's buffer once (a descriptor
    each in the main process; how many slots a worker fills depends on the timing); those
    of workers that ended are dropped when the next epoch's workers send theirs, so the
    descriptors beyond the ones kept for the workers known now never grow."""
    loader = DataLoader(PackedDataset(npy), batch_size=BATCH, num_workers=2,
                        collate_fn=collate, multiprocessing_context="fork")
    counts = []
    for _epoch in range(6):
        for _batch in loader:
            pass
        del _batch
        gc.collect()
        kept = len(arrivals._STATES) + len(arrivals._FDS)  # a descriptor each
        workers = [token for token in arrivals._STATES  # pools of this process: other tests'
                   if not token.startswith(f"{os.getpid()}-")]
        assert len(workers) <= 4, "only this epoch's and the last epoch's workers"
        assert {token for token, _ in arrivals._FDS} <= set(arrivals._STATES)
        counts.append(_lasting_descriptors() - kept)
    assert len(set(counts[1:])) == 1, counts
    alive = {os.getpid(), *(child.pid for child in psutil.Process().children())}
    ended = {int(token.split("-")[0]) for token in arrivals._STATES} - alive
    assert len(ended) <= 2  # the last epoch's workers, dropped when new ones send theirs


def test_copies_of_a_pooled_batch_in_the_worker_are_plain_lists() -> None:
    """Only the pickle that leaves for the main process carries the slot and state."""
    import copy

    pool = SlotPool()
    batch, slot = support.sent(pool, (2, 3, 4, 4))
    for copied in (copy.copy(batch), copy.deepcopy(batch)):
        assert type(copied) is list and torch.equal(copied[0], batch.images)
    assert not pool.state_sent and pool.state[slot] == BUSY
