"""A loop state saved by N ranks x K workers resumes on N' x K', exactly once: both readers,
Mix and class weights, the ranks simulated in one process by their split options (as a
process group would give them), DataLoaders with 0 and 2 workers; even ranks fork their
workers, odd ones fork or spawn them (`odd_start`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from packer.core.index import open_dataset
from readers import (
    ChunkSampler,
    Mix,
    PackedDataset,
    PackedIterableDataset,
    PartitionOptions,
    loop_state,
)
from tests.helpers import pack_wds

NUM, BATCH, EPOCH, STOP = 60, 4, 1, 3  # every rank stops after STOP batches
TOPOLOGIES = [((2, 2), (1, 0)), ((2, 2), (2, 0)), ((2, 0), (3, 2)), ((1, 2), (2, 2)),
              ((3, 2), (2, 1))]
Reader = Callable[[int, int], tuple[Any, dict[str, Any]]]  # (rank, world) -> (dataset, loader kw)


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("elastic"), NUM, 16, min_side=8, max_side=12)


@pytest.fixture(params=["fork", "spawn"])
def odd_start(request: pytest.FixtureRequest) -> str:
    """How odd ranks start their DataLoader workers (even ranks fork): a case per start
    method, the spawn one in the `spawn` tier (tests/conftest.py marks it)."""
    return str(request.param)


def split(rank: int, world: int) -> PartitionOptions:
    return PartitionOptions(chunk_size=4, buffer_size=6, rank=rank, world_size=world,
                        drop_last=False)


def kept_keys(batches: Any) -> list[str]:
    """The keys of the real samples (padding carries label -1)."""
    return [key for _, labels, keys in batches for key, label in zip(keys, labels.tolist(),
                                                                     strict=True) if label >= 0]


def run(reader: Reader, world: int, workers: int, state: dict[str, Any] | None,
        stop: int | None, odd_start: str) -> tuple[list[str], list[int]]:
    """Every rank's pass of EPOCH (the first `stop` batches of it), their keys and lengths."""
    keys, lengths = [], []
    for rank in range(world):
        data, options = reader(rank, world)
        reads = options.get("sampler") or data  # what holds the order
        if state is None:
            reads.set_epoch(EPOCH)
        else:
            reads.load_state_dict(state)
        context = "fork" if rank % 2 == 0 else odd_start
        loader = DataLoader(data, batch_size=BATCH, num_workers=workers, **options,
                            **({"multiprocessing_context": context} if workers else {}))
        batches = list(loader)[:stop]
        lengths.append(sum(len(b[2]) for b in batches))
        keys += kept_keys(batches)
    return keys, lengths


def check_elastic(reader: Reader, before: tuple[int, int], after: tuple[int, int],
                  expected: Counter[str], odd_start: str) -> None:
    seen, _ = run(reader, *before, None, STOP, odd_start)
    state = loop_state(EPOCH, STOP, BATCH, before[1], world_size=before[0])
    rest, lengths = run(reader, *after, state, None, odd_start)
    assert Counter(seen) + Counter(rest) == expected, f"{before} -> {after}: not exactly once"
    assert len(set(lengths)) == 1, f"{before} -> {after}: uneven new ranks {lengths}"


def every_key(path: Path) -> Counter[str]:
    return Counter(open_dataset(path)[1].keys())


@pytest.mark.parametrize(("before", "after"), TOPOLOGIES)
def test_iterable_resumes_on_another_topology(path: Path, before: tuple[int, int],
                                              after: tuple[int, int], odd_start: str) -> None:
    def reader(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, world))
        return ds, {}
    check_elastic(reader, before, after, every_key(path), odd_start)


@pytest.mark.parametrize(("before", "after"), TOPOLOGIES[:4])
def test_chunk_sampler_resumes_on_another_world(path: Path, before: tuple[int, int],
                                                after: tuple[int, int], odd_start: str) -> None:
    def reader(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        ds = PackedDataset(path, decode="raw", with_keys=True)
        return ds, {"sampler": ChunkSampler(ds, partition=split(rank, world))}
    check_elastic(reader, before, after, every_key(path), odd_start)


def test_mix_and_class_weights_resume_on_another_world(path: Path, odd_start: str) -> None:
    def mix(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        source = PackedIterableDataset(path, decode="raw", with_keys=True)
        options = PartitionOptions(buffer_size=6, rank=rank, world_size=world, drop_last=False)
        return Mix([source], epoch_size=NUM, partition=options), {}

    check_elastic(mix, (2, 2), (3, 0), every_key(path), odd_start)

    def weighted(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, world),
                                   class_weights="balanced")
        return ds, {}

    drawn = Counter(run(weighted, 1, 0, None, None, odd_start)[0])  # repeats and all
    check_elastic(weighted, (2, 2), (1, 0), drawn, odd_start)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize(("before", "after"), [((2, 2), (1, 0)), ((2, 2), (3, 2)),
                                               ((1, 2), (2, 1))])
def test_a_stateful_dataloader_state_resumes_on_another_topology(
        path: Path, before: tuple[int, int], after: tuple[int, int], odd_start: str) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    seen: list[str] = []
    states = []
    for rank in range(before[0]):
        ds = PackedIterableDataset(path, decode="raw", with_keys=True,
                                   partition=split(rank, before[0]))
        ds.set_epoch(EPOCH)
        loader = stateful(ds, batch_size=BATCH, num_workers=before[1],
                          **({"multiprocessing_context": "fork"} if before[1] else {}))
        batches = iter(loader)
        seen += kept_keys([next(batches) for _ in range(STOP)])
        states.append(loader.state_dict())
        del batches

    def reader(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, world))
        return ds, {}

    rest, lengths = run(reader, *after, states[0], None, odd_start)
    assert Counter(seen) + Counter(rest) == every_key(path), f"{before} -> {after}"
    assert len(set(lengths)) == 1


@pytest.mark.parametrize("middle", [(3, 2), (2, 2)])
def test_a_resumed_job_stops_and_resumes_again(path: Path, middle: tuple[int, int],
                                               odd_start: str) -> None:
    """2x2 stops, resumes on `middle` and stops again, then ends on 1x0: each sample once;
    on an unchanged topology the two stretches collapse into one count."""
    def reader(rank: int, world: int) -> tuple[Any, dict[str, Any]]:
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, world))
        return ds, {}

    seen, _ = run(reader, 2, 2, None, STOP, odd_start)
    first = loop_state(EPOCH, STOP, BATCH, 2, world_size=2)
    more, _ = run(reader, *middle, first, 2, odd_start)
    second = loop_state(EPOCH, 2, BATCH, middle[1], world_size=middle[0], resumed_from=first)
    assert ("resumed_from" in second) == (middle != (2, 2))
    rest, _ = run(reader, 1, 0, second, None, odd_start)
    assert Counter(seen) + Counter(more) + Counter(rest) == every_key(path)


def test_a_sampler_state_records_its_world_and_chains(path: Path) -> None:
    """ChunkSampler.state_dict() from 2 ranks loads on 1 (no loop state needed); the 1-rank
    pass of the re-split rest stops, and its own state_dict() resumes on 3 ranks: every
    sample of the epoch once. No workers, so what the sampler drew is what was consumed."""
    def sampler(rank: int, world: int) -> tuple[PackedDataset, ChunkSampler]:
        ds = PackedDataset(path, decode="raw", with_keys=True)
        return ds, ChunkSampler(ds, partition=split(rank, world))

    seen: list[str] = []
    states = []
    for rank in range(2):
        ds, first = sampler(rank, 2)
        first.set_epoch(EPOCH)
        batches = iter(DataLoader(ds, batch_size=BATCH, sampler=first))
        seen += kept_keys([next(batches) for _ in range(STOP)])
        states.append(first.state_dict())
    assert states[0] == {"epoch": EPOCH, "seed": 0, "samples_seen": STOP * BATCH,
                         "world_size": 2} == states[1]
    ds, middle = sampler(0, 1)
    middle.load_state_dict(states[0])
    batches = iter(DataLoader(ds, batch_size=BATCH, sampler=middle))
    seen += kept_keys([next(batches) for _ in range(2)])
    again = middle.state_dict()
    del batches
    assert again["resumed_from"]["world_size"] == 2 and again["world_size"] == 1
    rest, lengths = [], []
    for rank in range(3):
        ds, last = sampler(rank, 3)
        last.load_state_dict(again)
        batches = list(DataLoader(ds, batch_size=BATCH, sampler=last))
        rest += kept_keys(batches)
        lengths.append(sum(len(b[2]) for b in batches))
    assert Counter(seen) + Counter(rest) == every_key(path), "2 -> 1 -> 3: not exactly once"
    assert len(set(lengths)) == 1, lengths


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("after", [1, 3])
def test_a_stateful_dataloader_restores_its_own_state_on_another_world(
        path: Path, after: int, odd_start: str) -> None:
    """What Lightning's fit(ckpt_path=) does: rank 0's StatefulDataLoader state, saved on 2
    ranks x 2 workers, loaded into each new rank's own loader (2 workers, as torchdata
    requires), which hands each worker its own count: they pool them (WorkerBoard) and
    read the rest once across the new ranks."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    seen: list[str] = []
    states = []
    for rank in range(2):
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, 2))
        ds.set_epoch(EPOCH)
        loader = stateful(ds, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
        batches = iter(loader)
        seen += kept_keys([next(batches) for _ in range(STOP)])
        states.append(loader.state_dict())
        del batches
    rest, lengths = [], []
    for rank in range(after):
        ds = PackedIterableDataset(path, decode="raw", with_keys=True, partition=split(rank, after))
        loader = stateful(ds, batch_size=BATCH, num_workers=2,
                          multiprocessing_context="fork" if rank % 2 == 0 else odd_start)
        loader.load_state_dict(states[0])
        batches = list(loader)
        rest += kept_keys(batches)
        lengths.append(sum(len(b[2]) for b in batches))
    assert Counter(seen) + Counter(rest) == every_key(path), f"2 x 2 -> {after} x 2"
    assert len(set(lengths)) == 1, lengths
