"""ConcatDataset: several map-style packed datasets as one index space, for ChunkSampler.

    view = ConcatDataset([PackedDataset(a), PackedDataset(b)])
    sampler = ChunkSampler(view, source_weights=[0.8, 0.2], seed=0)

Index i of the view is index i - offsets[s] of source s (the sources end to end, as in
`readers.Mix`). With `source_weights` a ChunkSampler plans its epochs as Mix does
(`GroupPlan`, the sources its groups): exact largest-remainder counts per
source, each source drawn through its successive permutations; without, it is a plain
concatenation. A batch goes to each source's own `__getitems__` (its chunk cache, its
decode settings), padding flags kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from readers.options import DEFAULT_CHUNK_SIZE
from readers.plan.chunks import Spans, chunk_spans
from readers.sampling.sampler import PaddedIndex


class ConcatDataset(Dataset[Any]):
    """The sources end to end; `with_source=True` appends the source's number to samples."""

    def __init__(self, datasets: Sequence[Any], with_source: bool = False) -> None:
        if not datasets:
            raise ValueError("ConcatDataset needs at least one dataset")
        self.datasets = list(datasets)
        self.offsets = np.concatenate([[0], np.cumsum([len(d) for d in datasets])]).astype(
            np.int64)
        self.with_source = with_source
        self.chunk_size = getattr(self.datasets[0], "chunk_size", DEFAULT_CHUNK_SIZE)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def source_groups(self) -> tuple[Spans, ...]:
        """Each source's chunks, shifted into the view's index space (the mix's groups)."""
        groups = []
        for dataset, base in zip(self.datasets, self.offsets[:-1].tolist(), strict=True):
            spans = chunk_spans(len(dataset), getattr(dataset, "chunk_size", self.chunk_size))
            spans[:, :2] += base
            groups.append(spans)
        return tuple(groups)

    def set_epoch(self, epoch: int) -> None:
        """ChunkSampler forwards each pass's epoch: every source gets it (their crops)."""
        for dataset in self.datasets:
            if callable(getattr(dataset, "set_epoch", None)):
                dataset.set_epoch(epoch)

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        wanted = np.asarray([int(i) for i in indices], dtype=np.int64)
        if len(wanted) and not (wanted.min() >= 0 and wanted.max() < len(self)):
            raise IndexError(f"an index of {list(indices)} is out of range for {len(self)} "
                             "samples")
        sources = np.searchsorted(self.offsets, wanted, side="right") - 1
        out: list[Any] = [None] * len(indices)
        for s in np.unique(sources).tolist():
            where = np.flatnonzero(sources == s).tolist()
            local = [_like(indices[k], int(wanted[k] - self.offsets[s])) for k in where]
            dataset = self.datasets[s]
            read = getattr(dataset, "__getitems__", None)
            samples = read(local) if read is not None else [dataset[i] for i in local]
            for k, sample in zip(where, samples, strict=True):
                out[k] = (*sample, s) if self.with_source else sample
        return out


def _like(original: int, local: int) -> int:
    """The local index, still flagged as padding when the sampler flagged it."""
    return PaddedIndex(local) if isinstance(original, PaddedIndex) else local
