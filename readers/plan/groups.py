"""Pure, seeded plans that draw from several groups in fixed proportions: numpy only.

A *group* is a set of samples given as chunks (spans, as a `ChunkPlan` has them): one packed
dataset of a `Mix` (its indices shifted into one concatenated index space), or one class
of a class-weighted split (its runs of equal labels, cut at the chunk size). Each epoch
draws `num_samples` samples, `counts[g]` of them from group g:

    counts       largest-remainder rounding of num_samples * w_g / sum(w): every group gets
                 the floor of its quota, the samples left over go one each to the groups
                 with the largest fractions (ties: the lower group number). Exact, and the
                 same every epoch.
    within g     group g's passes, one after another: pass q is its chunks permuted and
                 rotated by epoch_rng(seed, q, stream, g), every sample once. Mix epoch e
                 takes positions [e * counts[g], (e + 1) * counts[g]) of that endless
                 sequence: a group drawn more than its size runs on into its next pass, one
                 drawn less resumes there next epoch, so every sample is drawn before any
                 repeats, and a group repeated k times shows each sample k times. The
                 cursor is counted from the epoch number, not kept: pure in (seed, epoch).
    interleave   the draws cut into pieces of `chunk_size`, the pieces of all groups
                 permuted by epoch_rng(seed, epoch, stream): reads stay chunk-local; the
                 reader's shuffle buffer mixes the pieces it holds.
    split        as ChunkPlan: trimmed (drop_last) or cycled with flagged repeats to
                 world_size * num_per_rank, then rank and worker slices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from readers.plan.chunks import (
    ChunkPlan,
    Spans,
    check_epoch,
    epoch_rng,
    num_in,
    shuffle_chunks,
    take,
)

MIX_STREAM = 3  # the generator streams of mix plans (sharding uses 1 and 2)
CLASS_STREAM = 4


def largest_remainder(weights: Sequence[float] | npt.ArrayLike,
                      total: int) -> npt.NDArray[np.int64]:
    """Integer counts summing to `total`, proportional to `weights` (see the module docstring)."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(w) == 0 or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and not all zero, "
                         f"not {w.tolist()}")
    if total < 0:
        raise ValueError(f"the number of samples to draw must be 0 or more, not {total}")
    quotas = w / w.sum() * total
    counts: npt.NDArray[np.int64] = np.floor(quotas).astype(np.int64)
    left = total - int(counts.sum())
    order = np.argsort(-(quotas - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def group_draws(chunks: Spans, count: int, seed: int, stream: int, group: int,
                epoch: int) -> Spans:
    """Epoch `epoch`'s `count` draws from one group: its passes' positions from epoch * count."""
    size = num_in(chunks)
    start, stop = epoch * count, (epoch + 1) * count
    pieces = [np.zeros((0, 3), dtype=np.int64)]
    for number in range(start // size, -(-stop // size)):
        begin = number * size  # pass `number` over the group: every sample once
        spans = shuffle_chunks(chunks, epoch_rng(seed, number, stream, group))
        pieces.append(take(spans, max(start - begin, 0), min(stop - begin, size)))
    return np.concatenate(pieces)


def cut(spans: Spans, size: int) -> tuple[Spans, npt.NDArray[np.int64]]:
    """The spans split at every multiple of `size` samples, with each piece's number."""
    lengths = spans[:, 1] - spans[:, 0]
    begins = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    points = np.union1d(begins[lengths > 0], np.arange(0, total, size, dtype=np.int64))
    row = np.searchsorted(begins, points, side="right") - 1
    ends = np.append(points[1:], total)
    starts = spans[row, 0] + points - begins[row]
    out: Spans = np.stack([starts, starts + ends - points, spans[row, 2]], axis=1)
    return out.reshape(-1, 3), points // size


@dataclass(frozen=True, eq=False)
class GroupPlan(ChunkPlan):
    """A ChunkPlan whose epoch draws `counts[g]` samples from each group (module docstring).

    `num_samples` must be sum(counts); `chunk_size` is the piece size of the interleave.
    """

    groups: tuple[Spans, ...] = field(default=())
    counts: tuple[int, ...] = field(default=())
    stream: int = MIX_STREAM

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.groups) != len(self.counts) or sum(self.counts) != self.num_samples:
            raise ValueError(f"counts {list(self.counts)} must give each of {len(self.groups)} "
                             f"groups a count and sum to {self.num_samples}")
        for number, (chunks, count) in enumerate(zip(self.groups, self.counts, strict=True)):
            if count and num_in(chunks) == 0:
                raise ValueError(f"group {number} has no samples but should give {count}")

    def sequence(self, epoch: int) -> Spans:
        epoch = check_epoch(epoch)
        rows, keys = [], []
        pieces_before = 0
        for g, (chunks, count) in enumerate(zip(self.groups, self.counts, strict=True)):
            if count == 0:
                continue
            draws = group_draws(chunks, count, self.seed, self.stream, g, epoch)
            pieces, piece = cut(draws, self.chunk_size)
            rows.append(pieces)
            keys.append(piece + pieces_before)
            pieces_before += int(piece[-1]) + 1
        order = epoch_rng(self.seed, epoch, self.stream).permutation(pieces_before)
        place = np.empty_like(order)
        place[order] = np.arange(pieces_before)
        spans: Spans = np.concatenate(rows)
        return spans[np.argsort(place[np.concatenate(keys)], kind="stable")]
