"""The disk cache's eviction policy, a pure function: property tests without files."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from readers.remote._eviction import Present, victims

entries = st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 1000)), max_size=30)


@given(entries, st.sets(st.integers(0, 29)), st.integers(0, 20_000))
def test_victims_are_the_oldest_unpinned_until_the_rest_fit(
        raw: list[tuple[int, int]], pinned: set[int], budget: int) -> None:
    present = [Present(mtime, shard, size) for shard, (mtime, size) in enumerate(raw)]
    chosen = victims(present, pinned, budget)
    assert not set(chosen) & pinned and len(set(chosen)) == len(chosen)
    by_shard = {entry.shard: entry for entry in present}
    left = sum(entry.size for entry in present) - sum(by_shard[s].size for s in chosen)
    unpinned_left = [e for e in present if e.shard not in pinned and e.shard not in chosen]
    if left > budget:  # over budget only when nothing more could go
        assert not unpinned_left
    else:  # and nothing went that was not needed: without the last victim it was over
        assert not chosen or left + by_shard[chosen[-1]].size > budget
    oldest_kept = min((e for e in unpinned_left), default=None)
    assert oldest_kept is None or all(by_shard[s] < oldest_kept for s in chosen)
