"""Hand-offs of the recycled shared memory (readers.batching._shm_pool) between a worker,
the main process, the garbage collector and a fork. Each test pins one way it can fail:
- a slot sent again while it is still out (a worker that keeps its samples) is tracked
  twice: the first finalizer is orphaned and later frees the slot's next buffer while
  the main process holds it; and a batch handed to another process must stop viewing
  its slot before the worker reuses it;
- a finalizer that runs while `_LOCK` is held by the same thread (a garbage collection
  inside `arrived`) deadlocks;
- a forked child can inherit `_LOCK` held and `_LIVE` filled (a batch unpickled by
  another thread between the before-fork hook and the fork) and then hangs pickling;
- a worker that keeps only a slot's storage (no tensor) is not counted.
"""

from __future__ import annotations

import contextlib
import gc
import pickle
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from functools import partial
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from readers import PackedDataset, collate
from readers.batching import _shm_arrivals as arrivals
from readers.batching._pooled import PooledBatch
from readers.batching._shm_pool import BUSY, FREE, SlotPool
from readers.batching.collate import _sent
from tests import shm_pool_support as support
from tests.shm_pool_support import from_a_slot

SHAPE = (2, 3, 4, 4)


@pytest.fixture(scope="module")
def npy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support.pack_small(tmp_path_factory.mktemp("pool-handoffs"))["npy"]


class _KeepsOneBatch(Dataset[Any]):
    """Keeps the samples of indices 4..7 (one batch) in the worker until `evict` exists."""

    def __init__(self, base: PackedDataset, evict: Path) -> None:
        self.base, self.evict = base, evict
        self.kept: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self.base)

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        if self.evict.exists():
            self.kept.clear()
        elif indices[0] == 4:
            if not self.kept:
                self.kept = dict(zip(indices, self.base.__getitems__(indices), strict=True))
            return [self.kept[i] for i in indices]
        return self.base.__getitems__(indices)


def test_a_slot_sent_again_while_held_does_not_free_its_next_buffer(
        npy: Path, tmp_path: Path) -> None:
    """Epoch 2 collates the kept samples again while the main process still holds epoch
    1's batch from their slot (the slot is out, so the batch is copied into another);
    epoch 1's batch is then handed to another process, the worker drops what it kept and
    epoch 3 is held whole: no finalizer of an earlier batch may free a slot under a held
    batch, which the worker would then overwrite."""
    want = {key: image.clone()
            for images, _, keys in DataLoader(PackedDataset(npy, with_keys=True), batch_size=8)
            for key, image in zip(keys, images, strict=True)}
    evict = tmp_path / "evict"
    loader = DataLoader(_KeepsOneBatch(PackedDataset(npy, with_keys=True), evict),
                        batch_size=4, num_workers=1, collate_fn=collate,
                        persistent_workers=True, multiprocessing_context="fork")
    kept = list(loader)[1]  # epoch 1: batch 1 gathered into a slot the worker keeps
    list(loader)  # epoch 2: the same slot sent again while `kept` is alive
    ForkingPickler.dumps(kept[0])  # handed to another process: the slot is given up
    evict.touch()  # the worker drops what it kept
    held = list(loader)  # epoch 3, all held: one lands in a new buffer in that slot
    del kept
    gc.collect()
    list(loader)  # epoch 4
    del loader
    changed = sum(not torch.equal(image, want[key])
                  for images, _, keys in held for image, key in zip(images, keys, strict=True))
    assert changed == 0, f"{changed} held images changed"


def test_a_given_up_buffer_is_not_reused_when_its_batch_is_sent_again() -> None:
    """The worker keeps its samples and collates them again after the main process handed
    the first batch off: once the main process drops the second one, the buffer must not
    be reused, since the process it was handed to still reads it."""
    pool = SlotPool()
    images = pool.take(SHAPE).fill_(1)  # the worker keeps these samples
    slot = pool.slot_of(images)
    assert slot is not None
    handed_off = support.received(_sent(images, partial(list, images), pool, [torch.arange(2)]))
    ForkingPickler.dumps(handed_off[0])  # another process gets it: torch moves it first
    assert not from_a_slot(handed_off[0]), "a handed-off batch still views its slot"
    again = support.received(_sent(images, partial(list, images), pool, [torch.arange(2)]))
    assert torch.equal(again[0], images)
    del again, images  # the main process and the worker drop theirs
    gc.collect()
    for _ in range(3):
        pool.take(SHAPE).fill_(7)
    assert bool((handed_off[0] == 1).all()), "the handed-off batch was overwritten"


class _CollectingLock:
    """`_LOCK`, with a garbage collection each time it is taken, as any allocation under
    it can trigger one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        taken: bool = self.inner.acquire(*args, **kwargs)
        gc.collect()
        return taken

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_batch_collected_while_another_arrives_does_not_deadlock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch in a reference cycle is freed by the garbage collector, which runs
    whenever an allocation asks for it: here inside `arrived`'s critical section."""
    reentrant = "RLock" in type(arrivals._LOCK).__name__
    fresh = threading.RLock() if reentrant else threading.Lock()  # a hang takes only this
    monkeypatch.setattr(arrivals, "_LOCK", _CollectingLock(fresh))
    pool = SlotPool()
    first, second = (pool.take(SHAPE) for _ in range(2))
    slots = [pool.slot_of(images) for images in (first, second)]
    assert slots == [0, 1]
    in_cycle = support.received(PooledBatch([first, torch.arange(2)], first, pool, 0))
    data = support.pickled_for_another_process(
        PooledBatch([second, torch.arange(2)], second, pool, 1))
    enabled = gc.isenabled()
    gc.disable()  # the cycle must still be there when the batch below arrives
    try:
        cycle: list[Any] = [in_cycle]
        cycle.append(cycle)
        del cycle, in_cycle
        arrived: list[Any] = []

        def arrive() -> None:
            with contextlib.suppress(RuntimeError):  # `_LOCK` released below, in a deadlock
                arrived.append(pickle.loads(data))

        thread = threading.Thread(target=arrive, daemon=True)
        thread.start()
        thread.join(3)
        hung = thread.is_alive()
        if hung and not reentrant:  # unblock it: a thread stuck inside a garbage
            fresh.release()  # collection would turn every later gc.collect() into a no-op
            thread.join(3)
    finally:
        if enabled:
            gc.enable()
    assert not hung, "unpickling a batch deadlocked in the finalizer of another"
    assert arrived, "the batch did not arrive"
    assert pool.state[0] == FREE and pool.state[1] == BUSY


_FORK_RACE = """
import os, signal, sys, threading, time
import torch
from multiprocessing.reduction import ForkingPickler
from tests.shm_pool_support import received as _received
from readers.batching import _shm_arrivals as arrivals
from readers.batching import _shm_pool as shm_pool
from readers.batching._pooled import PooledBatch
from readers.batching._shm_pool import SlotPool

inside = threading.Event()

def pin_memory_thread():  # unpickles batches between the before-fork hook and the fork
    pool = SlotPool()
    images = pool.take((2, 3, 4, 4))
    batch = _received(PooledBatch([images, torch.arange(2)], images, pool, 0))
    with arrivals._LOCK:  # inside `arrived` for the next batch
        inside.set()
        time.sleep(2)
    del batch

def during_fork():  # registered first, so it runs after shm_pool's before-fork hook
    if os.environ.get("RACE"):
        threading.Thread(target=pin_memory_thread, daemon=True).start()
        inside.wait(2)

os.register_at_fork(before=during_fork)
arrivals._watch_forks()
os.environ["RACE"] = "1"
pid = os.fork()
if pid == 0:  # a DataLoader worker: its queue pickles every batch it sends
    signal.alarm(3)  # a hang ends the child (SIGALRM) instead of the test run
    ForkingPickler.dumps(torch.ones(3))
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_while_a_batch_arrives_can_pickle() -> None:
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(_FORK_RACE)], cwd=root,
                              timeout=60, capture_output=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child hung pickling a tensor")
    assert done.returncode != 256 - 14, "the forked child hung pickling a tensor (SIGALRM)"
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_a_storage_kept_in_the_worker_keeps_its_slot() -> None:
    pool = SlotPool()
    view = pool.take(SHAPE)
    kept = view.untyped_storage()  # all the worker keeps of the batch
    del view
    reused = pool.take(SHAPE).data_ptr() == kept.data_ptr()
    assert not reused, "a buffer the worker still holds was handed out again"
