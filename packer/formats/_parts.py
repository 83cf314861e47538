"""The parts of a one-file format (lmdb, hdf5) that `pack append` grew.

A conversion writes one data file; each append adds the new samples as one more
complete file of the same format (a *part*: a shard of index.json, samples in order
after the previous parts'), so an append writes only the new samples and never
rewrites, copies or re-hashes the old data. A reader routes sample i to the part that
holds it, by index.json's shard ranges; a part's offsets are its own file's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from packer.core.index import Index
from packer.errors import CorruptDatasetError

T = TypeVar("T")


def part_name(first: str, number: int) -> str:
    """The name of part `number` (1, 2, ...) of a dataset whose first data file is
    `first`: `data.lmdb/data.mdb` -> `data.lmdb/data-00001.mdb`, `data.h5` ->
    `data.parts/data-00001.h5`."""
    folder, _, name = first.rpartition("/")
    stem, dot, ext = name.partition(".")
    return f"{folder or stem + '.parts'}/{stem}-{number:05d}{dot}{ext}"


def part_files(folder: Path, index: Index, first: str) -> list[Path]:
    """Every part's data file, in order; `first` alone for an index that lists none."""
    return [folder / shard.name for shard in index.shards] or [folder / first]


def open_parts(paths: Sequence[Path], open_part: Callable[[Path], T],
               close: Callable[[T], object]) -> list[T]:
    """`open_part` of each path; those already open are closed again if one is damaged."""
    opened: list[T] = []
    try:
        for path in paths:
            opened.append(open_part(path))
    except CorruptDatasetError:
        for part in opened:
            close(part)
        raise
    return opened


def read_by_part(index: Index, indices: Sequence[int],
                 read: Callable[[int, list[int]], Sequence[T]]) -> list[T]:
    """`read(part, its samples)` for each part `indices` touch, put back in their order."""
    if len(index.shards) <= 1:
        return list(read(0, list(indices)))
    parts = np.searchsorted(index.shard_starts, np.asarray(indices, dtype=np.int64),
                            side="right") - 1
    out: list[T | None] = [None] * len(indices)
    for part in np.unique(parts).tolist():
        positions = np.flatnonzero(parts == part).tolist()
        for position, value in zip(positions, read(part, [indices[p] for p in positions]),
                                   strict=True):
            out[position] = value
    return out  # type: ignore[return-value]  # every position is filled by one part
