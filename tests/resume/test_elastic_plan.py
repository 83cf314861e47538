"""The rest of an epoch re-split for another topology (readers.plan.elastic), as property tests:
for any dataset, chunk size, world N -> N', workers K -> K' and stopping point, what the
first job consumed and what the new one reads are every sample of the epoch exactly once,
with equal lengths on the new ranks. The consumed part is simulated as a DataLoader takes
it (worker streams, round-robin batches), independently of the module's own arithmetic."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.passes.stream import stream_order
from readers.plan.chunks import ChunkPlan, Spans, epoch_rng, expand, num_in, take
from readers.plan.elastic import Segment, even_out, piece, rest_of_epoch

SEED, EPOCH, BUFFER = 3, 1, 6


def order(rank: int, worker: int, count: int) -> npt.NDArray[np.int64]:
    return stream_order(count, BUFFER, epoch_rng(SEED, EPOCH, rank, worker, 2))


def delivered(spans: Spans, rank: int, worker: int) -> list[tuple[int, bool]]:
    """A worker's stream as the reader yields it: (sample, padded) in buffer order."""
    indices, padded = expand(spans)
    return [(int(indices[p]), bool(padded[p])) for p in order(rank, worker, len(indices))]


def loader_batches(streams: list[list[tuple[int, bool]]], batch: int) -> list[list[int]]:
    """Batches as a DataLoader takes them: round robin over the workers, in order, a worker
    that runs out leaving the rotation; the padded repeats left out of what is kept."""
    cut = [[s[i:i + batch] for i in range(0, len(s), batch)] for s in streams]
    out: list[list[int]] = []
    for step in range(max(len(c) for c in cut)):
        out += [[i for i, pad in c[step] if not pad] for c in cut if step < len(c)]
    return out


def consumed_by(plan: ChunkPlan, workers: int, batch: int, batches: int,
                dealt: int | None) -> Counter[int]:
    taken: Counter[int] = Counter()
    for rank in range(plan.world_size):
        streams = [delivered(plan.worker_spans(EPOCH, rank, w, workers, dealt), rank, w)
                   for w in range(max(workers, 1))]
        for b in loader_batches(streams, batch)[:batches]:
            taken.update(b)
    return taken


@settings(max_examples=150, deadline=None)
@given(num=st.integers(1, 120), chunk=st.integers(1, 16), world=st.integers(1, 4),
       workers=st.integers(0, 3), batch=st.integers(1, 9), new_world=st.integers(1, 5),
       new_workers=st.integers(0, 3), deal=st.booleans(), drop_last=st.booleans(),
       shuffle=st.booleans(), stop=st.floats(0, 1))
def test_before_and_after_are_the_epoch_once(num: int, chunk: int, world: int, workers: int,
                                             batch: int, new_world: int, new_workers: int,
                                             deal: bool, drop_last: bool, shuffle: bool,
                                             stop: float) -> None:
    if drop_last and num < world:
        return
    plan = ChunkPlan(num, chunk, world, shuffle, drop_last, SEED)
    dealt = batch if deal else None
    per_worker = [-(-n // batch) for n in
                  (num_in(plan.worker_spans(EPOCH, 0, w, workers, dealt))
                   for w in range(max(workers, 1)))]
    batches = int(stop * sum(per_worker))
    segment = Segment(world, workers, batch, batches, False, dealt)
    rest = rest_of_epoch(plan.epoch_spans(EPOCH), [segment], order, drop_last)
    epoch = Counter(int(i) for i, pad in zip(*expand(plan.epoch_spans(EPOCH)), strict=True)
                    if not pad)
    taken = consumed_by(plan, workers, batch, batches, dealt)
    if drop_last and 0 < num_in(rest) < new_world:
        return  # too few left to give every new rank one: refused
    if num_in(rest) == 0:
        assert taken == epoch
        return
    pieces = [piece(rest, new_world, drop_last, r, w, new_workers, dealt)
              for r in range(new_world) for w in range(max(new_workers, 1))]
    after = Counter(int(i) for p in pieces for i, pad in zip(*expand(p), strict=True)
                    if not pad)
    assert not (taken & after), "a sample read before and after"
    dropped = epoch - taken - after
    assert not (taken + after) - epoch, "a sample read more often than the epoch holds it"
    assert sum(dropped.values()) < (new_world if drop_last else 1), "samples lost"
    per_rank = {sum(num_in(p) for p in pieces[r * max(new_workers, 1):][:max(new_workers, 1)])
                for r in range(new_world)}
    assert len(per_rank) == 1, "uneven new ranks"


@settings(max_examples=60, deadline=None)
@given(num=st.integers(8, 90), world=st.integers(1, 3), batch=st.integers(1, 6),
       worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_resumes_chain(num: int, world: int, batch: int, worlds: list[int],
                       data: st.DataObject) -> None:
    """Stopped and resumed on a new world several times: still the epoch exactly once."""
    sequence = ChunkPlan(num, 4, world, True, False, SEED).epoch_spans(EPOCH)
    segments: list[Segment] = []
    taken: Counter[int] = Counter()
    rest = sequence
    for number, new_world in enumerate([world, *worlds]):
        evened = sequence if number == 0 else even_out(rest, new_world, False)
        per_rank = num_in(evened) // new_world
        batches = data.draw(st.integers(0, -(-per_rank // batch)))
        for rank in range(new_world):
            stream = delivered(take(evened, rank * per_rank, (rank + 1) * per_rank), rank, 0)
            for b in loader_batches([stream], batch)[:batches]:
                taken.update(b)
        segments.append(Segment(new_world, 0, batch, batches))
        rest = rest_of_epoch(sequence, segments, order, False)
        if num_in(rest) == 0:
            break
    left = Counter(int(i) for i in expand(rest)[0])
    assert taken + left == Counter(range(num))
