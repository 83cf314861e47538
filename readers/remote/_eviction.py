"""Which cached shards to delete: a pure function, so the policy is tested without files."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple


class Present(NamedTuple):
    """A complete or partial shard file in the mirror."""

    mtime_ns: int  # a pin touches it: the recency
    shard: int
    size: int


def victims(present: Sequence[Present], pinned: Collection[int], budget: int) -> list[int]:
    """Least recently used unpinned shards, oldest first, whose removal brings the rest
    within `budget` bytes (or as close as the pinned ones allow)."""
    total = sum(entry.size for entry in present)
    chosen: list[int] = []
    for entry in sorted(present):
        if total <= budget:
            break
        if entry.shard not in pinned:
            chosen.append(entry.shard)
            total -= entry.size
    return chosen
