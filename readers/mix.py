"""Mix: several packed datasets read as one, in chosen proportions, exactly once and resumable.

    mix = Mix([PackedIterableDataset(a), PackedDataset(b)], weights=[0.8, 0.2])
    DataLoader(mix, batch_size=64, num_workers=4)

A source is either reader of a packed dataset: the mix reads it by chunks either way,
so one way mixes map-style and iterable datasets alike.

The plan (`GroupPlan`) lives in one index space, the sources' indices laid
end to end: source s holds indices offsets[s] .. offsets[s + 1] - 1. Each epoch draws
`epoch_size` samples, exactly `counts[s]` from source s (largest-remainder rounding of the
weights), through each source's successive permutations, so over consecutive epochs every
sample of a source comes before any repeats. The draws split across ranks and workers as
a PackedIterableDataset's chunks do (exactly once, equal counts), and a pass reads them
through `_MixedReader`, which sends every span to its source's own reader: sources may
differ in format and location, and reads stay chunk-sequential in each.

Each source decodes with its own settings (decode, size, augment, transform, with_keys);
the mix's seed, epoch and split settings replace the sources' own. Epochs, ranks and
resume work as in PackedIterableDataset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from packer.formats.base import RecordReader
from readers._base import Sample, _PackedBase
from readers.options import DEFAULT_CHUNK_SIZE, DEFAULT_PARTITION, PartitionOptions
from readers.passes.base import PartitionPasses
from readers.passes.stream import pass_records
from readers.plan.chunks import ChunkPlan, Spans, chunk_spans, epoch_rng
from readers.plan.groups import GroupPlan, largest_remainder


class _MixedReader:
    """Reads indices of the concatenated space from the sources' own readers."""

    def __init__(self, readers: Sequence[RecordReader], offsets: np.ndarray) -> None:
        self.readers, self.offsets = readers, offsets

    def source_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        """A plan's span never crosses sources: one source's sequential read."""
        s = self.source_of(start)
        base = int(self.offsets[s])
        return self.readers[s].read_range(start - base, stop - base)

    def prefetch(self, rows: Sequence[Sequence[int]]) -> None:
        """Show each source that can prefetch (a URL's shards) its coming spans."""
        for s, reader in enumerate(self.readers):
            base = int(self.offsets[s])
            mine = [[start - base, stop - base, padded] for start, stop, padded in rows
                    if self.source_of(start) == s]
            if mine:
                reader.prefetch(mine)

    def stop_prefetch(self) -> None:
        """Stop the sources' prefetch threads when the pass ends."""
        for reader in self.readers:
            reader.stop_prefetch()

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        sources = np.searchsorted(self.offsets, np.asarray(indices, np.int64), side="right") - 1
        out: list[bytes] = [b""] * len(indices)
        for s in np.unique(sources).tolist():
            where = np.flatnonzero(sources == s)
            local = (np.asarray(indices, np.int64)[where] - self.offsets[s]).tolist()
            for k, data in zip(where.tolist(), self.readers[s].read_many(local), strict=True):
                out[k] = data
        return out


class Mix(PartitionPasses, IterableDataset[Sample]):
    """Reads `sources` as one dataset, `weights` deciding how many samples come from each.

    `epoch_size` (default: the sum of the sources' sizes) samples per epoch over all ranks,
    less fewer than world_size with drop_last (see PackedIterableDataset); `weights`
    default to the sources' sizes (a plain concatenation). `with_source=True` appends the
    source's number to every sample (a "source" entry when samples are dicts).
    `batch_size`: deal whole batches to workers, as PackedIterableDataset does.
    """

    def __init__(self, sources: Sequence[_PackedBase], weights: Sequence[float] | None = None,
                 *, epoch_size: int | None = None, seed: int = 0, with_source: bool = False,
                 batch_size: int | None = None,
                 partition: PartitionOptions = DEFAULT_PARTITION) -> None:
        if partition.chunk_size is not None:
            raise ValueError("Mix reads each source in that source's own chunks: give "
                             "chunk_size to the sources, not to the Mix's split")
        if not sources:
            raise ValueError("Mix needs at least one source dataset")
        self.sources = list(sources)
        if any(getattr(source, "subset", None) is not None for source in self.sources):
            raise ValueError("Mix reads whole sources: a source with split= is not supported")
        sizes = [source.index.num_samples for source in self.sources]
        weights = sizes if weights is None else weights
        if len(weights) != len(sizes):
            raise ValueError(f"{len(weights)} weights for {len(sizes)} sources: give one each")
        self.epoch_size = sum(sizes) if epoch_size is None else epoch_size
        self.counts = tuple(largest_remainder(weights, self.epoch_size).tolist())
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._groups = tuple(_shifted(chunk_spans(n, source.chunk_size), int(base))
                             for n, source, base in zip(sizes, self.sources, self.offsets[:-1],
                                                        strict=True))
        self.seed, self.drop_last, self.with_source = seed, partition.drop_last, with_source
        self._init_passes(partition, shuffle=True, seed=seed, batch_size=batch_size)
        self._check_plan()

    def _plan_for(self, world_size: int) -> ChunkPlan:
        return GroupPlan(self.epoch_size, DEFAULT_CHUNK_SIZE, world_size, True, self.drop_last,
                         self.seed, groups=self._groups, counts=self.counts)

    def _stream(self, spans: Spans, plan: ChunkPlan, where: tuple[int, int, int],
                skip: int) -> Iterator[Sample]:
        handles = [source.handles() for source in self.sources]
        reader = _MixedReader([h.reader for h in handles], self.offsets)
        rng = epoch_rng(self.seed, *where, 2)
        crop = (self.seed, where[0])
        for i, padded, data in pass_records(reader, spans, self.buffer_size, rng, skip):  # type: ignore[arg-type]
            s = reader.source_of(i)
            source = self.sources[s]
            sample = source.make_sample(handles[s].table, i - int(self.offsets[s]), data, padded,
                                    crop)
            self._seen += 1
            yield _tagged(sample, s) if self.with_source else sample


def _shifted(spans: Spans, base: int) -> Spans:
    out = spans.copy()
    out[:, :2] += base
    return out


def _tagged(sample: Any, source: int) -> Any:
    if isinstance(sample, Mapping):
        return {**sample, "source": source}
    return (*sample, source)
