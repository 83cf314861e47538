"""What training frameworks rely on without saying: passes, batch counts, late ranks.

- every pass is an epoch: a loop that never calls set_epoch (Lightning, for an
  IterableDataset) still gets a new order each pass, and all DataLoader workers of a pass
  agree on its epoch (exactly once), fork or spawn, persistent or not;
- a dataset that knows the batch size deals whole batches to its workers, so a DataLoader
  makes exactly len(loader) batches (a framework stops there);
- ranks are resolved when a pass starts, and a contradiction is refused, not ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler

import readers.passes.world
from readers import ChunkSampler, PackedDataset, PackedIterableDataset, loop_state
from readers.options import PartitionOptions
from readers.passes.resume import samples_per_worker
from readers.plan.chunks import ChunkPlan, expand, worker_bounds
from tests.helpers import pack_every_format

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker")
NUM = 40
SIZE = (8, 8)
LOADERS = [(0, None, False), (2, "fork", False), (2, "spawn", False), (2, "fork", True),
           (3, "spawn", True)]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_every_format(tmp_path_factory.mktemp("passes"), NUM, SIZE, 12, 20)["wds"]


def keys_of(batches: Iterable[Any]) -> list[str]:
    return [key for batch in batches for key in batch[-1]]


def make_loader(data: Any, workers: int, context: str | None, persistent: bool,
                batch_size: int = 4, **kwargs: Any) -> DataLoader[Any]:
    extra: dict[str, Any] = {"multiprocessing_context": context,
                             "persistent_workers": persistent} if workers else {}
    return DataLoader(data, batch_size=batch_size, num_workers=workers, **extra, **kwargs)


def iterable(path: Path, batch_size: int | None = None, **split: Any) -> PackedIterableDataset:
    options = PartitionOptions(**{"chunk_size": 4, "buffer_size": 6, **split})
    return PackedIterableDataset(path, decode="raw", with_keys=True, batch_size=batch_size,
                                 partition=options)


@pytest.mark.parametrize(("workers", "context", "persistent"), LOADERS)
def test_unnamed_passes_are_new_epochs_read_exactly_once(path: Path, workers: int,
                                                         context: str | None,
                                                         persistent: bool) -> None:
    it = iterable(path)
    loader = make_loader(it, workers, context, persistent)
    passes = [keys_of(loader) for _ in range(3)]
    for keys in passes:
        assert sorted(keys) == sorted(passes[0]) and len(set(keys)) == NUM, "not exactly once"
    assert len({tuple(keys) for keys in passes}) == 3, "a pass repeated an epoch's order"
    assert it.epoch == 3
    it.set_epoch(1)
    assert keys_of(loader) == passes[1], "set_epoch names the epoch of the next pass"
    reference = iterable(path)
    reference.set_epoch(2)
    assert keys_of(make_loader(reference, workers, context, persistent)) == passes[2]


# Stopping spawned workers mid-start is the point of this test. Under load, torch's
# shutdown of such a worker sometimes ends it with SIGABRT ("terminate called without an
# active exception" while its interpreter finalizes), which the dropped iterator's
# __del__ reports as unraisable; that is torch's, and the assertions below are not affected.
@pytest.mark.spawn
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*_MultiProcessingDataLoaderIter.__del__"
    ":pytest.PytestUnraisableExceptionWarning")
def test_a_pass_stopped_early_still_counts(path: Path) -> None:
    it = iterable(path)
    loader = make_loader(it, 2, "spawn", False)
    next(iter(loader))  # workers shut down at once, maybe before some of them started
    keys = keys_of(loader)
    assert sorted(keys) == sorted(keys_of(make_loader(iterable(path), 0, None, False)))
    assert len(set(keys)) == NUM


def test_sampler_passes_are_new_epochs(path: Path) -> None:
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    sampler = ChunkSampler(ds, partition=PartitionOptions(buffer_size=6))
    assert isinstance(sampler, DistributedSampler), "Lightning leaves DistributedSamplers alone"
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(NUM)) and first != second
    assert sampler.epoch == 2
    sampler.set_epoch(1)
    assert list(sampler) == second
    assert (sampler.num_replicas, sampler.rank, sampler.num_samples) == (1, 0, NUM)


def test_loading_a_state_sets_the_epoch(path: Path) -> None:
    """A fresh reader resumes the state's epoch without being told (issue: set_epoch)."""
    it = iterable(path)
    it.set_epoch(1)
    full = [key for *_, key in it]
    source = iterable(path)
    source.set_epoch(1)
    partial = iter(source)
    seen = [next(partial)[-1] for _ in range(7)]
    fresh = iterable(path)
    fresh.load_state_dict(source.state_dict())
    assert fresh.epoch == 1
    assert seen + [key for *_, key in fresh] == full
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    sampler = ChunkSampler(ds, partition=PartitionOptions(buffer_size=6))
    sampler.set_epoch(1)
    everything = list(sampler)
    again = ChunkSampler(ds, partition=PartitionOptions(buffer_size=6))
    again.load_state_dict({"epoch": 1, "seed": 0, "samples_seen": 5})
    assert list(again) == everything[5:]
    late = ChunkSampler(ds, partition=PartitionOptions(buffer_size=6))
    late.load_state_dict({"epoch": 1, "seed": 0, "samples_seen": 5})
    late.set_epoch(2)
    with pytest.raises(ValueError, match=r"mid-way through epoch 1.*set_epoch\(1\)"):
        iter(late)


@pytest.mark.parametrize(("workers", "context", "persistent"), LOADERS[:3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_dealt_batches_make_exactly_len_loader(path: Path, workers: int, context: str | None,
                                               persistent: bool, drop_last: bool) -> None:
    batch = 6  # 2 workers of 20 would make 4 batches each where ceil(40 / 6) is 7
    it = iterable(path, batch_size=batch)
    loader = make_loader(it, workers, context, persistent, batch_size=batch,
                         drop_last=drop_last)
    batches = list(loader)
    assert len(batches) == len(loader)
    sizes = [len(b[-1]) for b in batches]
    expected = NUM // batch * [batch] + ([] if drop_last else [NUM % batch])
    assert sorted(sizes, reverse=True) == expected, "more than one partial batch"
    learned = make_loader(iterable(path), workers, context, persistent, batch_size=batch,
                          drop_last=drop_last)  # no batch_size=: dealt the loader's
    learned_sizes = [len(b[-1]) for b in learned]
    assert len(learned_sizes) == len(learned)
    assert sorted(learned_sizes, reverse=True) == expected, "a partial batch per worker"


def test_dealt_batches_resume_from_loop_state(path: Path) -> None:
    batch = 3

    def make() -> tuple[PackedIterableDataset, DataLoader[Any]]:
        it = iterable(path, batch_size=batch)
        it.set_epoch(2)
        return it, make_loader(it, 3, "fork", False, batch_size=batch)

    full = list(make()[1])
    for consumed in (0, 1, 5, len(full) - 1, len(full)):
        it, loader = make()
        it.load_state_dict(loop_state(2, consumed, batch, num_workers=3))
        assert keys_of(loader) == keys_of(full[consumed:]), consumed


@given(count=st.integers(1, 300), workers=st.integers(1, 9), batch=st.integers(1, 40))
def test_dealing_covers_the_rank_with_one_partial_batch(count: int, workers: int,
                                                        batch: int) -> None:
    bounds = [worker_bounds(count, w, workers, batch) for w in range(workers)]
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(a[1] == b[0] for a, b in pairwise(bounds))
    partial = [hi for lo, hi in bounds if (hi - lo) % batch]
    assert partial in ([], [count]), "only the share that ends the rank may end partial"
    counts, _ = samples_per_worker(count, -(-count // batch), batch, workers, dealt=batch)
    assert counts == [hi - lo for lo, hi in bounds], "a whole epoch is every share"
    plan = ChunkPlan(count, 4, 1, True, True, 0)
    spans = [plan.worker_spans(0, 0, w, workers, batch) for w in range(workers)]
    indices = sorted(i for s in spans for i in expand(s)[0].tolist())
    assert indices == list(range(count))


def fake_group(monkeypatch: pytest.MonkeyPatch, world: tuple[int, int] | None) -> None:
    monkeypatch.setattr(readers.passes.world, "group_world", lambda: world)


def test_rank_is_resolved_when_a_pass_starts(path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Built before the process group (a script's top level, before trainer.fit)."""
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    sampler = ChunkSampler(ds, partition=PartitionOptions(drop_last=False))
    it = iterable(path, drop_last=False)
    fake_group(monkeypatch, (1, 2))
    assert (len(sampler), sampler.rank, sampler.num_replicas) == (NUM // 2, 1, 2)
    assert len(it) == NUM // 2 and len(list(it)) == NUM // 2
    assert len(list(sampler)) == NUM // 2
    fake_group(monkeypatch, (0, 3))
    for reader in (sampler, it):
        with pytest.raises(ValueError, match="first pass ran as rank 1 of 2, this one as "
                                             "rank 0 of 3"):
            iter(reader)


def test_arguments_a_later_group_contradicts_are_refused(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = PackedDataset(path, decode="raw", with_keys=True, chunk_size=4)
    guessed = ChunkSampler(ds, partition=PartitionOptions(rank=0, world_size=1))
    fake_group(monkeypatch, (1, 2))
    with pytest.raises(ValueError, match="given rank 0 of 1 before the process group existed, "
                                         "and the group now says rank 1 of 2"):
        iter(guessed)
    # given while a group exists
    deliberate = ChunkSampler(ds, partition=PartitionOptions(rank=0, world_size=1))
    assert len(list(deliberate)) == NUM
    agreeing = iterable(path, world_size=2)
    fake_group(monkeypatch, (0, 2))
    assert len(list(agreeing)) == NUM // 2


@pytest.mark.spawn
def test_spawned_workers_get_the_rank_the_main_process_found(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spawned worker has no process group: the dataset carries the main one's world."""
    it = iterable(path, drop_last=False)
    fake_group(monkeypatch, (1, 2))
    keys = keys_of(make_loader(it, 2, "spawn", False))
    by_rank = {}
    for rank in (0, 1):
        alone = iterable(path, drop_last=False, rank=rank, world_size=2)
        by_rank[rank] = keys_of(make_loader(alone, 2, "spawn", False))
    assert keys == by_rank[1] and not set(keys) & set(by_rank[0])
