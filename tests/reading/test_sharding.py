"""Pure logic, no files: the chunk assignment (exactly once, equal ranks, seeded, local
reads) and the chunk cache's read policy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.options import PartitionOptions
from readers.plan.chunks import (
    ChunkPlan,
    buffered_shuffle,
    chunk_spans,
    cycle_to,
    expand,
    rotate,
    take,
)
from readers.ram.chunk_cache import RECORD_OVERHEAD, CachedReader
from readers.sampling.sampler import ChunkSampler, PaddedIndex
from tests.helpers import CountingReader


@dataclass(frozen=True)
class Case:
    num_samples: int
    chunk_size: int
    world_size: int
    num_workers: int
    shuffle: bool
    drop_last: bool
    seed: int


cases = st.builds(
    Case,
    num_samples=st.integers(1, 2000),
    chunk_size=st.integers(1, 300),
    world_size=st.integers(1, 4),
    num_workers=st.integers(0, 3),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32),
)


def plan_of(case: Case) -> ChunkPlan:
    return ChunkPlan(case.num_samples, case.chunk_size, case.world_size, case.shuffle,
                     case.drop_last, case.seed)


def assignment(plan: ChunkPlan, case: Case, epoch: int) -> list[list[np.ndarray]]:
    """Per rank, per worker: the sample indices with padded ones encoded as -1 - i."""
    out = []
    for rank in range(case.world_size):
        workers = []
        for worker in range(max(case.num_workers, 1)):
            spans = plan.worker_spans(epoch, rank, worker, case.num_workers)
            indices, padded = expand(spans)
            workers.append(np.where(padded, -1 - indices, indices))
        out.append(workers)
    return out


def flat(parts: list[list[np.ndarray]]) -> np.ndarray:
    return np.concatenate([np.concatenate(workers) for workers in parts])


def valid(case: Case) -> bool:
    return not (case.drop_last and case.num_samples < case.world_size)


@settings(max_examples=150, deadline=None)
@given(cases, st.integers(0, 10_000))
def test_every_sample_once_and_equal_ranks(case: Case, epoch: int) -> None:
    if not valid(case):
        with pytest.raises(ValueError, match="cannot give each of"):
            plan_of(case)
        return
    plan = plan_of(case)
    parts = assignment(plan, case, epoch)
    per_rank = [sum(len(w) for w in workers) for workers in parts]
    assert per_rank == [plan.num_per_rank] * case.world_size
    for workers in parts:
        sizes = [len(w) for w in workers]
        assert max(sizes) - min(sizes) <= 1
    everything = flat(parts)
    real = everything[everything >= 0]
    assert len(np.unique(real)) == len(real), "a sample was read twice"
    assert real.min() >= 0 and real.max() < case.num_samples
    if case.drop_last:
        assert case.num_samples - len(real) == case.num_samples % case.world_size
        assert (everything >= 0).all()
    else:
        assert sorted(real.tolist()) == list(range(case.num_samples))
        padding = everything[everything < 0]
        assert len(padding) < case.world_size
        assert ((-1 - padding) < case.num_samples).all()


@settings(max_examples=60, deadline=None)
@given(cases.filter(valid), st.integers(0, 10_000))
def test_seeded_order(case: Case, epoch: int) -> None:
    plan = plan_of(case)
    first = flat(assignment(plan, case, epoch))
    assert np.array_equal(first, flat(assignment(plan_of(case), case, epoch)))
    others = [flat(assignment(plan, case, epoch + k)) for k in range(1, 21)]
    if not case.shuffle:
        assert all(np.array_equal(first, other) for other in others)
    elif case.num_samples >= 2:
        assert any(not np.array_equal(first, other) for other in others)


@settings(max_examples=60, deadline=None)
@given(cases.filter(lambda c: valid(c) and c.shuffle and c.drop_last
                    and c.num_samples % c.world_size != 0))
def test_dropped_samples_change_between_epochs(case: Case) -> None:
    plan = plan_of(case)
    dropped = set()
    for epoch in range(20):
        kept = set(flat(assignment(plan, case, epoch)).tolist())
        dropped.add(frozenset(set(range(case.num_samples)) - kept))
    assert len(dropped) > 1


@settings(max_examples=80, deadline=None)
@given(cases.filter(valid), st.integers(0, 100))
def test_reads_stay_within_chunks(case: Case, epoch: int) -> None:
    """Each span is one piece of one chunk, and a worker's spans are few: sequential reads."""
    plan = plan_of(case)
    num_chunks = -(-case.num_samples // case.chunk_size)
    for rank in range(case.world_size):
        rank_spans = plan.rank_spans(epoch, rank)
        spans = [plan.worker_spans(epoch, rank, w, case.num_workers)
                 for w in range(max(case.num_workers, 1))]
        joined = np.concatenate([expand(s)[0] for s in spans])
        assert np.array_equal(joined, expand(rank_spans)[0])
        for part in spans:
            assert ((part[:, 0] // case.chunk_size) == ((part[:, 1] - 1) // case.chunk_size)).all()
        repeats = -(-plan.num_per_rank // case.num_samples)
        assert len(rank_spans) <= num_chunks * repeats + 2 * repeats + 1


@given(st.integers(1, 500), st.integers(1, 64), st.integers(0, 500), st.integers(0, 500))
def test_span_helpers(num_samples: int, chunk_size: int, a: int, b: int) -> None:
    spans = chunk_spans(num_samples, chunk_size)
    everything = np.arange(num_samples)
    assert np.array_equal(expand(spans)[0], everything)
    lo, hi = sorted((a % (num_samples + 1), b % (num_samples + 1)))
    assert np.array_equal(expand(take(spans, lo, hi))[0], everything[lo:hi])
    assert np.array_equal(expand(rotate(spans, lo))[0], np.roll(everything, -lo))
    cycled, padded = expand(cycle_to(spans, num_samples + b))
    assert np.array_equal(cycled, np.resize(everything, num_samples + b))
    assert padded.sum() == b


@given(st.lists(st.integers(), max_size=300), st.integers(0, 50), st.integers(0, 2**32))
def test_buffered_shuffle_is_a_bounded_permutation(items: list[int], size: int,
                                                   seed: int) -> None:
    tagged = list(enumerate(items))
    out = list(buffered_shuffle(tagged, size, np.random.default_rng(seed)))
    assert sorted(out) == sorted(tagged)
    if size <= 1:
        assert out == tagged
    for position, (origin, _) in enumerate(out):
        assert position >= origin - size


@settings(max_examples=40, deadline=None)
@given(cases.filter(valid), st.integers(0, 1000), st.integers(0, 64))
def test_chunk_sampler_splits_ranks_exactly(case: Case, epoch: int, buffer: int) -> None:
    class Sized:
        chunk_size = case.chunk_size

        def __len__(self) -> int:
            return case.num_samples

    seen: list[int] = []
    for rank in range(case.world_size):
        split = PartitionOptions(drop_last=case.drop_last, rank=rank, world_size=case.world_size,
                             buffer_size=buffer)
        sampler = ChunkSampler(Sized(), shuffle=case.shuffle, seed=case.seed, partition=split)
        sampler.set_epoch(epoch)
        indices = list(sampler)
        assert len(indices) == len(sampler)
        seen += [i for i in indices if not isinstance(i, PaddedIndex)]
    assert len(seen) == len(set(seen))
    expected = case.num_samples - (case.num_samples % case.world_size if case.drop_last else 0)
    assert len(seen) == expected


def test_plan_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        ChunkPlan(10, 0)
    with pytest.raises(ValueError, match="world_size"):
        ChunkPlan(10, 4, world_size=0)
    with pytest.raises(ValueError, match="seed"):
        ChunkPlan(10, 4, seed=-1)
    with pytest.raises(ValueError, match="no samples"):
        ChunkPlan(0, 4)
    with pytest.raises(ValueError, match="3 samples cannot give each of 4 ranks"):
        ChunkPlan(3, 4, world_size=4, drop_last=True)
    with pytest.raises(ValueError, match="epoch"):
        ChunkPlan(10, 4).epoch_spans(-1)
    with pytest.raises(ValueError, match="rank"):
        ChunkPlan(10, 4, world_size=2).rank_spans(0, 2)
    assert ChunkPlan(3, 4, world_size=4, drop_last=False).num_per_rank == 1


def test_cache_reads_busy_chunks_whole_and_stays_bounded() -> None:
    reader = CountingReader(200)
    chunk_bytes = 32 * (10 + RECORD_OVERHEAD)  # a chunk's records and what holding them costs
    cached = CachedReader(reader, 200, chunk_size=32, cache_bytes=3 * chunk_bytes)
    assert cached.promote_at == 4
    steps = [([5], [("many", 5)]), ([5], []), ([6, 7], [("many", 6, 7)]),
             ([8], [("range", 0, 32)]), (list(range(32)), [])]
    for indices, calls in steps:
        reader.calls.clear()
        assert cached.read_many(indices) == [reader.records[i] for i in indices]
        assert reader.calls == calls, indices
    for chunk in (1, 2, 3):
        cached.read_many([32 * chunk + k for k in range(4)])
    assert len(cached.cache) == 3 and cached.cache.num_bytes <= 3 * chunk_bytes
    reader.calls.clear()
    assert cached.read_many([0, 33, 150, 190]) == [reader.records[i] for i in (0, 33, 150, 190)]
    assert reader.calls == [("many", 0, 150, 190)], "chunk 0 was evicted; misses in one call"
    off = CachedReader(reader, 200, chunk_size=32, cache_bytes=0)
    reader.calls.clear()
    off.read_many([1, 1])
    assert reader.calls == [("many", 1, 1)] and len(off.cache) == 0


def _scalar_shuffle(items: list[int], buffer_size: int, rng: np.random.Generator) -> list[int]:
    """The buffered shuffle drawn one `rng.integers` at a time: the reference order."""
    if buffer_size <= 1:
        return list(items)
    out, buffer = [], []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        j = int(rng.integers(buffer_size))
        out.append(buffer[j])
        buffer[j] = item
    return out + [buffer[int(j)] for j in rng.permutation(len(buffer))]


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 3000), buffer_size=st.integers(0, 1200), seed=st.integers(0, 99))
def test_block_draws_give_the_scalar_draws_order(count: int, buffer_size: int,
                                                 seed: int) -> None:
    """Draws taken a block at a time yield the order of one draw per item, and leave
    the generator where those draws would have (a later draw is the same)."""
    ours, reference = np.random.default_rng(seed), np.random.default_rng(seed)
    got = list(buffered_shuffle(range(count), buffer_size, ours))
    assert got == _scalar_shuffle(list(range(count)), buffer_size, reference)
    assert int(ours.integers(1 << 40)) == int(reference.integers(1 << 40))
