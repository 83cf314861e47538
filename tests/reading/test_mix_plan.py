"""Properties of the mixing plan (readers.plan.groups): exact counts, no repeat before a group
is used up, disjoint ranks with equal counts, a pure function of (seed, epoch)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.plan.chunks import chunk_spans, expand, num_in
from readers.plan.groups import GroupPlan, cut, group_draws, largest_remainder

sizes_st = st.lists(st.integers(1, 30), min_size=1, max_size=4)


def groups_of(sizes: list[int], chunk: int) -> tuple[np.ndarray, ...]:
    """Each size as a source laid end to end in one index space, as Mix does."""
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = []
    for n, base in zip(sizes, offsets[:-1], strict=True):
        spans = chunk_spans(n, chunk)
        spans[:, :2] += base
        out.append(spans)
    return tuple(out)


@given(st.lists(st.floats(0, 10), min_size=1, max_size=6), st.integers(0, 1000))
def test_largest_remainder_is_exact_and_within_one_of_the_quota(weights: list[float],
                                                                total: int) -> None:
    if sum(weights) <= 0:
        with pytest.raises(ValueError, match="not all zero"):
            largest_remainder(weights, total)
        return
    counts = largest_remainder(weights, total)
    quotas = np.array(weights) / sum(weights) * total
    assert counts.sum() == total
    assert (np.abs(counts - quotas) < 1).all()


def test_largest_remainder_breaks_ties_towards_the_first() -> None:
    assert largest_remainder([1, 1, 1], 10).tolist() == [4, 3, 3]
    assert largest_remainder([0.8, 0.2], 7).tolist() == [6, 1]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 25), st.integers(0, 60), st.integers(1, 6), st.integers(0, 3))
def test_a_group_shows_every_sample_before_any_repeats(size: int, count: int, chunk: int,
                                                       seed: int) -> None:
    """Consecutive epochs read one endless sequence of permutations of the group."""
    chunks = chunk_spans(size, chunk)
    draws = np.concatenate([expand(group_draws(chunks, count, seed, 3, 0, e))[0]
                            for e in range(4)])
    assert len(draws) == 4 * count
    for start in range(0, len(draws) - size + 1, size):
        assert sorted(draws[start:start + size].tolist()) == list(range(size))
    counts = Counter(draws.tolist())
    assert max(counts.values(), default=0) - min(counts.values(), default=0) <= 1


@given(sizes_st, st.integers(1, 7))
def test_cut_keeps_the_sequence_and_ends_pieces_at_multiples(sizes: list[int],
                                                             size: int) -> None:
    spans = np.concatenate(groups_of(sizes, 5))
    pieces, number = cut(spans, size)
    assert expand(pieces)[0].tolist() == expand(spans)[0].tolist()
    lengths = pieces[:, 1] - pieces[:, 0]
    begins = np.cumsum(lengths) - lengths
    assert (number == begins // size).all() and ((begins + lengths - 1) // size == number).all()


@settings(max_examples=60, deadline=None)
@given(sizes_st, st.data(), st.integers(1, 4), st.booleans(), st.integers(0, 5))
def test_epochs_draw_exact_counts_split_disjointly_across_ranks(
        sizes: list[int], data: st.DataObject, world: int, drop_last: bool, epoch: int) -> None:
    weights = data.draw(st.lists(st.floats(0.1, 5), min_size=len(sizes), max_size=len(sizes)))
    epoch_size = data.draw(st.integers(world, 80))
    counts = tuple(largest_remainder(weights, epoch_size).tolist())
    plan = GroupPlan(epoch_size, 4, world, True, drop_last, 7,
                     groups=groups_of(sizes, 3), counts=counts)
    whole = plan.epoch_spans(epoch)
    ranks = [plan.rank_spans(epoch, r) for r in range(world)]
    assert [num_in(r) for r in ranks] == [plan.num_per_rank] * world
    assert np.concatenate([expand(r)[0] for r in ranks]).tolist() == expand(whole)[0].tolist()
    assert expand(plan.epoch_spans(epoch))[0].tolist() == expand(whole)[0].tolist()
    real = expand(whole)[0][~expand(whole)[1]]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    per_group = np.bincount(np.searchsorted(offsets, real, side="right") - 1,
                            minlength=len(sizes))
    if drop_last:  # fewer than world_size samples dropped, from any group
        assert (per_group <= counts).all() and sum(counts) - per_group.sum() < world
    else:
        assert per_group.tolist() == list(counts)


def test_a_group_without_samples_cannot_be_drawn_from() -> None:
    with pytest.raises(ValueError, match="group 1 has no samples"):
        GroupPlan(4, 2, groups=(chunk_spans(3, 2), chunk_spans(0, 2)), counts=(2, 2))
