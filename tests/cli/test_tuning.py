"""The recommendation rule, the memory formula and the warnings, on synthetic measurements."""

from hypothesis import given
from hypothesis import strategies as st

from readers.diagnostics.tuning import (
    LoaderConfig,
    Measurement,
    feed_verdict,
    plateau_workers,
    queue_memory_bytes,
    recommend,
    warnings_for,
)


def measured(workers: int, rate: float, prefetch: int = 2, pin: bool = False) -> Measurement:
    config = LoaderConfig(workers, prefetch if workers else None, 64, pin)
    return Measurement(config, rate, rate / 64, 0.01, 0.02, 10**8, 100, 1.0)


def test_recommends_cheapest_within_five_percent() -> None:
    results = [measured(0, 400), measured(1, 900), measured(2, 1700), measured(4, 1760),
               measured(4, 1780, prefetch=4)]
    chosen = recommend(results)
    assert chosen.config.num_workers == 2  # 1700 >= 0.95 * 1780, and cheaper than 4 workers


def test_prefers_smaller_prefetch_and_no_pinning_on_ties() -> None:
    results = [measured(2, 1000, prefetch=4), measured(2, 990, prefetch=2, pin=True),
               measured(2, 985, prefetch=2)]
    assert recommend(results).config == LoaderConfig(2, 2, 64, False)


@given(st.lists(st.tuples(st.integers(0, 8), st.floats(1, 1e5)), min_size=1, max_size=12))
def test_recommendation_is_always_within_tolerance(points: list[tuple[int, float]]) -> None:
    results = [measured(w, r) for w, r in points]
    chosen = recommend(results)
    best = max(r.images_per_s for r in results)
    assert chosen.images_per_s >= 0.95 * best
    cheaper = [r for r in results if r.config.cost < chosen.config.cost]
    assert all(r.images_per_s < 0.95 * best for r in cheaper)


def test_queue_memory_formula() -> None:
    config = LoaderConfig(4, 3, 64)
    assert queue_memory_bytes(config, 150_528) == 4 * 3 * 64 * 150_528
    assert queue_memory_bytes(LoaderConfig(0, None, 32), 100) == 32 * 100


def test_warns_about_memory_cores_and_plateau() -> None:
    results = [measured(1, 1000), measured(2, 1900), measured(4, 2000), measured(8, 2010)]
    chosen = recommend(results)
    notes = warnings_for(results, chosen, cpus=4, available_bytes=10**6, bytes_per_sample=150_528)
    assert any("quarter" in n for n in notes)
    assert any("8 workers on 4 CPU cores" in n for n in notes)
    assert any("beyond 2 workers" in n for n in notes)


def test_no_warnings_when_scaling_is_healthy() -> None:
    results = [measured(1, 1000), measured(2, 1950)]
    notes = warnings_for(results, recommend(results), cpus=2, available_bytes=10**12,
                         bytes_per_sample=1000)
    assert notes == []
    assert plateau_workers(results) is None


def test_feed_verdict() -> None:
    fast = feed_verdict(2000, 64, model_step_ms=50)  # needs 1280 images/s
    assert fast is not None and fast.startswith("keeps up")
    slow = feed_verdict(1000, 64, target_rate=2000)
    assert slow is not None and "falls short" in slow and "50%" in slow
    assert feed_verdict(1000, 64) is None
