"""Pure, seeded assignment of chunks to (rank, worker): numpy only, no torch, no I/O.

A *chunk* is a contiguous index range of `chunk_size` samples (the last may be short).
A *span* is a contiguous piece of a chunk, stored as one row `[start, stop, padded]`
of an int64 array of shape (k, 3); `padded` is 1 where the samples are repeats added
to even out the ranks. Keeping assignments as spans (not index lists) keeps reads
sequential and the plan tiny however large the dataset.

One epoch, in the spirit of DistributedSampler but at chunk granularity:

    chunks 0..C-1 --permute(seed, epoch)--> c7 c2 c9 ...    (only when shuffled)
    concatenate their samples, rotate by a random offset     (only when shuffled)
    drop_last:  cut to world_size * (N // world_size)        (drops < world_size samples)
    otherwise:  cycle from the start to world_size * ceil(N / world_size), repeats flagged
    rank r:     samples [r * per_rank, (r + 1) * per_rank) of that sequence
    worker w:   an even contiguous split of the rank's samples (or of its batches, when
                the reader knows the batch size: then only the rank's last is partial)

The rotation makes the dropped samples differ from epoch to epoch even when the
dataset is a single chunk. The worker split depends only on `per_rank` and the number
of workers, so every rank's workers get the same counts and every rank yields the same
number of batches, even with a partial last batch per worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

Spans = npt.NDArray[np.int64]
T = TypeVar("T")


def chunk_spans(num_samples: int, chunk_size: int) -> Spans:
    """Every chunk of the dataset as one span, in index order."""
    starts = np.arange(0, num_samples, chunk_size, dtype=np.int64)
    stops = np.minimum(starts + chunk_size, num_samples)
    return np.stack([starts, stops, np.zeros_like(starts)], axis=1).reshape(-1, 3)


def num_in(spans: Spans) -> int:
    """How many samples the spans describe."""
    return int((spans[:, 1] - spans[:, 0]).sum())


def take(spans: Spans, lo: int, hi: int) -> Spans:
    """Samples lo..hi-1 of the sequence that `spans` describes, again as spans."""
    lengths = spans[:, 1] - spans[:, 0]
    ends = np.cumsum(lengths)
    begins = ends - lengths
    keep = (ends > lo) & (begins < hi) & (lengths > 0)
    out: Spans = spans[keep].copy()
    out[:, 0] += np.maximum(lo - begins[keep], 0)
    out[:, 1] -= np.maximum(ends[keep] - hi, 0)
    return out


def rotate(spans: Spans, offset: int) -> Spans:
    """The sequence started at sample `offset`, wrapping around."""
    total = num_in(spans)
    rotated: Spans = np.concatenate([take(spans, offset, total), take(spans, 0, offset)])
    return rotated


def shuffle_chunks(chunks: Spans, rng: np.random.Generator) -> Spans:
    """The chunks permuted, their sequence then rotated to start at a random sample."""
    return rotate(chunks[rng.permutation(len(chunks))], int(rng.integers(num_in(chunks))))


def cycle_to(spans: Spans, count: int) -> Spans:
    """The sequence repeated from its start until it holds `count` samples; repeats flagged."""
    total = num_in(spans)
    pieces = [take(spans, 0, count)]
    remaining = count - total
    while remaining > 0:
        repeat = take(spans, 0, remaining)
        repeat[:, 2] = 1
        pieces.append(repeat)
        remaining -= total
    return np.concatenate(pieces)


def expand(spans: Spans) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Sample indices and padding flags, one per sample, in span order."""
    lengths = spans[:, 1] - spans[:, 0]
    begins = np.cumsum(lengths) - lengths
    positions = np.arange(int(lengths.sum()), dtype=np.int64)
    indices = positions + np.repeat(spans[:, 0] - begins, lengths)
    return indices, np.repeat(spans[:, 2].astype(bool), lengths)


def even_out(spans: Spans, world_size: int, drop_last: bool) -> Spans:
    """`spans` cut (drop_last) or cycled with flagged repeats to a multiple of world_size."""
    total = num_in(spans)
    per_rank = total // world_size if drop_last else -(-total // world_size)
    if per_rank < 1:
        raise ValueError(f"the rest of the epoch has {total} samples: too few for "
                         f"{world_size} ranks with drop_last=True")
    total = per_rank * world_size
    return take(spans, 0, total) if drop_last else cycle_to(spans, total)


def split_evenly(count: int, part: int, num_parts: int) -> tuple[int, int]:
    """Bounds of part `part` when `count` items are cut into `num_parts` near-equal pieces."""
    return part * count // num_parts, (part + 1) * count // num_parts


def worker_bounds(count: int, worker: int, num_workers: int,
                  batch_size: int | None = None) -> tuple[int, int]:
    """Bounds of worker `worker`'s share of a rank's `count` samples.

    Without a batch size, an even split. With one, whole batches are dealt out (an even
    split of ceil(count / batch_size) batches), so only the rank's last batch can be
    partial: a DataLoader then makes exactly ceil(count / batch_size) batches, the
    `len()` it reports, where an even split would leave one partial batch per worker.
    """
    if batch_size is None:
        return split_evenly(count, worker, num_workers)
    lo, hi = split_evenly(-(-count // batch_size), worker, num_workers)
    return min(lo * batch_size, count), min(hi * batch_size, count)


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """A generator that depends only on its arguments (same on every rank and worker)."""
    return np.random.default_rng([seed, epoch, *stream])


@dataclass(frozen=True)
class ChunkPlan:
    """How one dataset is split across ranks and workers; validated when built."""

    num_samples: int
    chunk_size: int
    world_size: int = 1
    shuffle: bool = True
    drop_last: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, not {self.chunk_size}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be at least 1, not {self.world_size}")
        if self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, not {self.seed}")
        if self.num_samples < 1:
            raise ValueError("the dataset has no samples: there is nothing to split")
        if self.num_per_rank < 1:
            raise ValueError(
                f"{self.num_samples} samples cannot give each of {self.world_size} ranks a "
                "sample with drop_last=True; use drop_last=False (flagged repeats) or fewer ranks"
            )

    @property
    def num_per_rank(self) -> int:
        """Samples every rank yields per epoch (the same on all ranks)."""
        if self.drop_last:
            return self.num_samples // self.world_size
        return -(-self.num_samples // self.world_size)

    def epoch_spans(self, epoch: int) -> Spans:
        """The whole epoch's sequence, trimmed or padded to world_size * num_per_rank."""
        return even_out(self.sequence(epoch), self.world_size, self.drop_last)

    def sequence(self, epoch: int) -> Spans:
        """The epoch's `num_samples` draws before they are evened out for the ranks."""
        spans = chunk_spans(self.num_samples, self.chunk_size)
        if not self.shuffle:
            return spans
        return shuffle_chunks(spans, epoch_rng(self.seed, check_epoch(epoch)))

    def rank_spans(self, epoch: int, rank: int) -> Spans:
        """What rank `rank` reads this epoch."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1}, not {rank}")
        per_rank = self.num_per_rank
        return take(self.epoch_spans(epoch), rank * per_rank, (rank + 1) * per_rank)

    def worker_spans(self, epoch: int, rank: int, worker: int, num_workers: int,
                     batch_size: int | None = None) -> Spans:
        """What worker `worker` of rank `rank` reads this epoch (num_workers 0 means 1);
        `batch_size`: deal whole batches (see `worker_bounds`)."""
        num_workers = max(num_workers, 1)
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker must be in 0..{num_workers - 1}, not {worker}")
        lo, hi = worker_bounds(self.num_per_rank, worker, num_workers, batch_size)
        return take(self.rank_spans(epoch, rank), lo, hi)


def check_epoch(epoch: int) -> int:
    """Epochs seed the generators, so they must be non-negative integers."""
    if epoch < 0:
        raise ValueError(f"epoch must be a non-negative integer, not {epoch}")
    return int(epoch)


def buffered_shuffle(items: Iterable[T], buffer_size: int,
                     rng: np.random.Generator) -> Iterator[T]:
    """Shuffle a stream within a window of `buffer_size` items (memory stays bounded).

    Each incoming item takes the place of a random buffered one, which is yielded;
    the remainder is shuffled at the end. A buffer of 0 or 1 keeps the order. The draws
    are those of one `rng.integers(buffer_size)` per replaced item (taken a block at a
    time, at a fraction of a scalar draw's cost), so the order is a function of the
    generator and the count alone.
    """
    if buffer_size <= 1:
        yield from items
        return
    buffer: list[T] = []
    draws = _Draws(rng, buffer_size)
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        j = draws.next()
        yield buffer[j]
        buffer[j] = item
    draws.settle()
    for j in rng.permutation(len(buffer)).tolist():
        yield buffer[j]


class _Draws:
    """`rng.integers(bound)` one at a time, drawn DRAW_BLOCK at once: numpy's block of
    bounded integers is the sequence of its scalar draws, and `settle` leaves the
    generator where the scalar draws made so far would have."""

    def __init__(self, rng: np.random.Generator, bound: int) -> None:
        self.rng, self.bound = rng, bound
        self.block: list[int] = []
        self.used = 0
        self.state: Mapping[str, Any] | None = None

    def next(self) -> int:
        if self.used == len(self.block):
            self.state = self.rng.bit_generator.state
            self.block = self.rng.integers(self.bound, size=DRAW_BLOCK).tolist()
            self.used = 0
        self.used += 1
        return self.block[self.used - 1]

    def settle(self) -> None:
        """Rewind the block's unused draws (the generator draws on after the stream)."""
        if self.state is not None and self.used < len(self.block):
            self.rng.bit_generator.state = self.state
            self.rng.integers(self.bound, size=self.used)
        self.block, self.used, self.state = [], 0, None


DRAW_BLOCK = 1024
