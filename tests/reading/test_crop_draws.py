"""CropDraws: the counter-based draws behind every crop (readers.augment).

Deterministic by construction (a pure function of seed, epoch and index), so the
frequency checks below are fixed numbers, not flaky samples.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from readers.augment import CropDraws

indices = st.integers(0, 2**70)


@given(indices, st.integers(0, 2**31), indices, st.floats(-5, 5), st.floats(0.001, 5))
def test_uniform_stays_in_its_interval(seed: int, epoch: int, index: int, low: float,
                                       width: float) -> None:
    draws = CropDraws(seed, epoch, index)
    for _ in range(4):
        assert low <= draws.uniform(low, low + width) < low + width


@given(indices, indices, st.integers(-50, 50), st.integers(1, 2**32 - 1))
def test_integers_stay_in_their_range(seed: int, index: int, low: int, span: int) -> None:
    draws = CropDraws(seed, 0, index)
    assert all(low <= draws.integers(low, low + span) < low + span for _ in range(4))


def test_the_draws_are_a_function_of_seed_epoch_and_index_only() -> None:
    def first(seed: int, epoch: int, index: int) -> list[float]:
        draws = CropDraws(seed, epoch, index)
        return [draws.uniform(0, 1) for _ in range(3)]

    assert first(3, 1, 7) == first(3, 1, 7)
    variants = [first(3, 1, 7), first(4, 1, 7), first(3, 2, 7), first(3, 1, 8),
                first(3 + 2**64, 1, 7), first(7, 1, 3), first(1, 3, 7)]
    assert len({tuple(v) for v in variants}) == len(variants), "two keys gave one stream"


def test_integers_are_even_across_their_range() -> None:
    counts = Counter(CropDraws(0, 0, index).integers(0, 7) for index in range(70_000))
    assert sorted(counts) == list(range(7))
    assert all(abs(n - 10_000) < 400 for n in counts.values()), counts  # ~4 sigma


def test_uniform_fills_deciles_evenly_and_draws_do_not_repeat() -> None:
    draws = CropDraws(1, 2, 3)
    values = [draws.uniform(0, 1) for _ in range(50_000)]
    deciles = Counter(int(v * 10) for v in values)
    assert all(abs(n - 5_000) < 300 for n in deciles.values()), deciles
    assert len(set(values)) == len(values)


def test_negative_seeds_and_indices_are_refused() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        CropDraws(-1, 0, 0)
    with pytest.raises(ValueError, match="non-negative"):
        CropDraws(0, 0, -1)
