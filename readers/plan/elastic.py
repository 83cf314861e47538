"""The rest of an epoch after a job of one topology stopped, re-split for another: numpy only.

Every order in an epoch is a pure function of (seed, epoch, rank, worker): the epoch's
sequence (`ChunkPlan.epoch_spans`), each rank's block of it, each worker's piece of the
block and the shuffle buffer's draws over that piece. So "N ranks x K workers each
consumed b batches of B" names exactly which positions of the sequence were consumed, and
the rest is known without reading a byte:

    sequence   c7 c2 c9 c4 ...  (chunks, evened to N * per_rank; repeats flagged)
    consumed   what each (rank, worker) stream had delivered after b batches
    rest       the sequence less the consumed positions and the flagged repeats,
               in sequence order: long runs of neighbouring samples, read span by span
    re-split   the rest evened for N' ranks (dropped or padded, flagged), then each
               rank's block and each worker's piece as for a whole epoch

A `Segment` is one stretch a job ran on one topology; a job that resumes on another world
and stops again adds a segment, each taken from the rest the previous ones left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from readers.plan.chunks import Spans, even_out, expand, num_in, take, worker_bounds

# positions 0..count-1 in the order stream `(rank, worker)` delivers them
StreamOrder = Callable[[int, int, int], npt.NDArray[np.int64]]


@dataclass(frozen=True)
class Segment:
    """How far a job on one topology got: every rank consumed `batches_consumed` batches.

    `num_workers` 0 means one stream per rank (a ChunkSampler: batches reach the loop in
    sampler order whatever the workers); `dealt` is the run a PackedIterableDataset dealt
    its workers whole (None: an even split); `drop_last` the DataLoader's. `counts`, when
    known (the workers' own states in a StatefulDataLoader's), are the samples each worker
    had delivered, and the batch count is not used.
    """

    world_size: int
    num_workers: int
    batch_size: int
    batches_consumed: int
    drop_last: bool = False
    dealt: int | None = None
    counts: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.batch_size < 1:
            raise ValueError(f"a resume segment needs world_size and batch_size of at least 1, "
                             f"not {self.world_size} and {self.batch_size}")
        if self.num_workers < 0 or self.batches_consumed < 0:
            raise ValueError("a resume segment needs num_workers and batches_consumed of 0 "
                             "or more")


def consumed_mask(sequence: Spans, segment: Segment, order: StreamOrder) -> npt.NDArray[np.bool_]:
    """Which positions of `sequence` (evened for segment.world_size) the segment consumed."""
    total = num_in(sequence)
    per_rank = total // segment.world_size
    mask = np.zeros(total, dtype=bool)
    workers = max(segment.num_workers, 1)
    counts = segment.counts if segment.counts is not None else samples_per_worker(
        per_rank, segment.batches_consumed, segment.batch_size, segment.num_workers,
        segment.drop_last, segment.dealt)[0]  # delivered by each worker, on every rank
    for worker, count in enumerate(counts):
        lo, hi = worker_bounds(per_rank, worker, workers, segment.dealt)
        for rank in range(segment.world_size):
            positions = order(rank, worker, hi - lo)[:count]
            mask[rank * per_rank + lo + positions] = True
    return mask


def samples_per_worker(num_per_rank: int, batches_consumed: int, batch_size: int,
                       num_workers: int, drop_last: bool = False,
                       dealt: int | None = None) -> tuple[list[int], int]:
    """Samples each worker had delivered when the loop had consumed `batches_consumed`
    batches, and the worker the DataLoader would have asked next.

    Worker w holds its share of the rank's samples (`worker_bounds`, as in ChunkPlan: even,
    or in whole batches of `dealt` when the dataset deals batches) and makes
    ceil(share / batch_size) batches (floor with drop_last); the DataLoader takes them round
    robin from worker 0, skipping workers that have none left.
    """
    workers = max(num_workers, 1)
    shares = [hi - lo for lo, hi in
              (worker_bounds(num_per_rank, w, workers, dealt) for w in range(workers))]
    limits = [share // batch_size if drop_last else -(-share // batch_size) for share in shares]
    if not 0 <= batches_consumed <= sum(limits):
        raise ValueError(f"{batches_consumed} batches consumed, but an epoch of {num_per_rank} "
                         f"samples in batches of {batch_size} over {workers} worker(s) has "
                         f"{sum(limits)}: the state comes from another configuration")
    taken = [0] * workers
    left, last = batches_consumed, -1
    while left:
        for w in range(workers):
            if left and taken[w] < limits[w]:
                taken[w] += 1
                left -= 1
                last = w
    counts = [min(t * batch_size, share) for t, share in zip(taken, shares, strict=True)]
    return counts, (last + 1) % workers


def rest_of(sequence: Spans, consumed: npt.NDArray[np.bool_]) -> Spans:
    """The positions of `sequence` neither consumed nor flagged repeats, as runs."""
    indices, padded = expand(sequence)
    left = indices[~consumed & ~padded]
    if len(left) == 0:
        return np.zeros((0, 3), dtype=np.int64)
    breaks = np.flatnonzero(np.diff(left) != 1) + 1
    starts = left[np.concatenate([[0], breaks])]
    stops = left[np.concatenate([breaks - 1, [len(left) - 1]])] + 1
    return np.stack([starts, stops, np.zeros_like(starts)], axis=1).astype(np.int64)


def rest_of_epoch(sequence: Spans, segments: Sequence[Segment], order: StreamOrder,
                  drop_last: bool) -> Spans:
    """What `segments` left of an epoch whose first segment read `sequence` (its plan's
    epoch_spans for the first segment's world); each later segment read the rest before it,
    evened (`drop_last`: the reader's) and split as `piece` splits it."""
    rest = sequence
    for number, segment in enumerate(segments):
        evened = rest if number == 0 else even_out(rest, segment.world_size, drop_last)
        rest = rest_of(evened, consumed_mask(evened, segment, order))
    return rest


def piece(rest: Spans, world_size: int, drop_last: bool, rank: int, worker: int,
          num_workers: int, dealt: int | None) -> Spans:
    """What (rank, worker) of a new topology reads of `rest`, as a whole epoch would split."""
    if num_in(rest) == 0:
        return rest
    evened = even_out(rest, world_size, drop_last)
    per_rank = num_in(evened) // world_size
    lo, hi = worker_bounds(per_rank, worker, max(num_workers, 1), dealt)
    return take(evened, rank * per_rank + lo, rank * per_rank + hi)
