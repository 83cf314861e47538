"""`split="val"`: a reader over one split of DST/splits, as `pack split` writes them.

A subset is an index map: position p of the reader is sample `indices[p]` of the
dataset. Every plan (ChunkPlan, the weighted ones, resume and its re-split) works on
positions 0..len(subset)-1 as it works on a whole dataset, so the exactly-once split
across ranks and workers holds for the subset unchanged; only the reading side maps
positions to samples: `PackedDataset` per index, `PackedIterableDataset` per span
(`sample_spans`: a plan's spans of positions become spans of samples, a run of
consecutive samples kept as one sequential read).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from packer.core.index import Index
from packer.dataset.open import is_url
from packer.dataset.splits import load_subset
from readers.plan.chunks import Spans, expand


class Subset:
    """The sample indices of one split, ascending."""

    def __init__(self, name: str, indices: npt.NDArray[np.int64]) -> None:
        if not len(indices):
            raise ValueError(f"split {name!r} holds no samples; split with a larger fraction")
        self.name = name
        self.indices = indices

    @classmethod
    def open(cls, path: str | Path, index: Index, name: str) -> Subset:
        """Split `name` of the local dataset at `path` (whose index is `index`)."""
        if not isinstance(name, str):
            raise TypeError(f"split= names a split that `pack split` wrote ('train', 'val', "
                            f"...), not a {type(name).__name__}: how an epoch is dealt to "
                            "ranks goes in partition=PartitionOptions(...)")
        if is_url(str(path)):
            raise ValueError(f"split={name!r}: {path} is a URL; split= reads the splits of "
                             "a local dataset folder (run `pack split` there, then upload)")
        return cls(name, load_subset(Path(path).resolve(), index, name))

    def __len__(self) -> int:
        return len(self.indices)

    def sample(self, position: int) -> int:
        return int(self.indices[position])

    def sample_spans(self, spans: Spans) -> Spans:
        """Spans of positions as spans of samples, in the same order: each span is cut
        where its samples stop being consecutive (padding flags kept)."""
        positions, padded = expand(spans)
        if not len(positions):
            return np.zeros((0, 3), np.int64)
        samples = self.indices[positions]
        lengths = spans[:, 1] - spans[:, 0]
        span_start = np.zeros(len(samples), bool)
        span_start[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
        cut = span_start | np.concatenate([[True], np.diff(samples) != 1])
        starts = np.flatnonzero(cut)
        stops = np.append(starts[1:], len(samples))
        out: Spans = np.stack([samples[starts], samples[stops - 1] + 1,
                               padded[starts].astype(np.int64)], axis=1)
        return out

    def labels(self, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The labels of the subset's samples, in position order."""
        result: npt.NDArray[np.int64] = np.asarray(labels)[self.indices]
        return result
