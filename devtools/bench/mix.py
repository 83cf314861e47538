"""Mixing and weighted-sampling cases of scripts/bench_read.py (issue 14).

    wds-Mix           readers.Mix of two wds datasets (the packed copy and a second copy
                      of it, 0.8 / 0.2), against one PackedIterableDataset: <= 10% slower
    lmdb-chunk        PackedDataset + ChunkSampler(shuffle=True): the plain shuffle
    lmdb-balanced     the same with class_weights="balanced": <= 10% slower than plain
    wds-balanced      PackedIterableDataset(class_weights="balanced") against the plain
                      one: the per-class chunk schedule keeps tar reads sequential
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from readers import ChunkSampler, Mix, PackedDataset, PackedIterableDataset


def second_copy(path: Path) -> Path:
    """A copy of a packed dataset beside it: a second, distinct source for the mix."""
    copy = path.with_name(path.name + "-copy")
    if not copy.exists():
        shutil.copytree(path, copy)
    return copy


def mix_cases(case: Callable[..., Any], settings: Any, packed: dict[str, Path]) -> list[Any]:
    """`case` builds a read.Case; the baselines are the plain readers of the same data."""
    size = settings.size
    shown = f"rgb8 {size[0]}x{size[1]}"
    cases = []
    if "wds" in packed:
        wds, copy = packed["wds"], second_copy(packed["wds"])

        def mix() -> Mix:
            parts = [PackedIterableDataset(p, size=size) for p in (wds, copy)]
            return Mix(parts, weights=[0.8, 0.2], epoch_size=parts[0].index.num_samples)

        cases.append(case("wds-Mix", "Mix of 2 wds (0.8/0.2)", "wds", shown, mix,
                          targets=(("wds-PackedIterableDataset-rgb8", 0.9),)))
        cases.append(case("wds-balanced", "PackedIterableDataset balanced", "wds", shown,
                          lambda: PackedIterableDataset(wds, size=size,
                                                        class_weights="balanced"),
                          targets=(("wds-PackedIterableDataset-rgb8", 0.9),)))
    if "lmdb" in packed:
        lmdb = packed["lmdb"]
        for name, weights in (("chunk", None), ("balanced", "balanced")):
            targets = (("lmdb-chunk", 0.9),) if weights else ()
            cases.append(case(f"lmdb-{name}", f"ChunkSampler {name}", "lmdb", shown,
                              lambda: PackedDataset(lmdb, size=size), targets=targets,
                              sampler=lambda ds, w=weights: ChunkSampler(ds, class_weights=w)))
    return cases
