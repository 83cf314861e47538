"""PackedIterableDataset: streams this rank's chunks, split exactly once among workers
(the module of both datasets says what they share)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from torch.utils.data import IterableDataset

from packer.formats.base import RecordReader
from readers._base import Sample, SampleSettings, Transform, _PackedBase, remote_source
from readers.augment import Augment
from readers.damage import DamagedRecord
from readers.decoding.decode import Mode
from readers.fields import FieldNames, fields_ahead, with_fields
from readers.options import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PARTITION,
    OnError,
    PartitionOptions,
    RemoteOptions,
)
from readers.passes.base import PartitionPasses
from readers.passes.stream import SpanRecord, pass_records
from readers.plan.chunks import ChunkPlan, Spans, epoch_rng
from readers.ram.copies import in_memory_copy
from readers.sampling.weighted import ClassWeights, weighted_split
from readers.subset import Subset


class PackedIterableDataset(PartitionPasses, _PackedBase, IterableDataset[Sample]):
    """Streams this rank's share of chunks, split among DataLoader workers.

    Chunks are read in order with `read_range` (tar shards sequentially) and shuffled
    within `partition=PartitionOptions(buffer_size=...)` samples; the buffer then holds about
    buffer_size / chunk_size chunks, which sets how well classes mix (index order is
    sorted by key). `len()` is the exact number of samples this rank yields per epoch.

    `path` may be a URL (s3://bucket/prefix, file://...): index.json and the tables are
    fetched now, shards on demand into `remote=RemoteOptions(cache_dir=...)`, least
    recently used ones evicted beyond its `max_cache_bytes` (default 8 GiB, shared by the
    processes of the machine); its `storage_options` go to fsspec.

    `batch_size` deals each DataLoader worker whole batches (without it, the batch size
    of the loader that iterates it), so the loader makes exactly `len(loader)` batches.
    Under Accelerate's `prepare` (and transformers' Trainer) the framework splits across
    ranks and the dataset gives it the whole epoch.

    `augment` (readers.RandomResizedCrop or CenterCrop) crops every sample at decode, the
    box a pure function of (seed, epoch of the pass, sample index).

    `in_memory=True` copies the dataset (a URL: downloads it) once per node into shared
    RAM that every worker and rank reads.

    `split="val"` streams one split that `pack split` wrote into the dataset folder,
    partitioned exactly once across ranks and workers like a whole dataset.

    `fields_in_memory=True` reads the `fields=` of every sample once, here, into
    columns the stream takes them from, as PackedDataset does.

    `on_error="skip"` (`OnError`): a damaged or undecodable sample is
    logged, counted (`num_skipped`, all workers together) and its place in the stream
    holds a flagged pad (the next readable sample, label PAD_LABEL), so `len()` and every
    rank's batch count stay what the plan says and every other sample is yielded once.
    """

    def __init__(self, path: str | Path, *, shuffle: bool = True, seed: int = 0,
                 decode: Mode = "rgb8", size: tuple[int, int] | None = None,
                 augment: Augment | None = None, transform: Transform | None = None,
                 with_keys: bool = False, batch_size: int | None = None,
                 partition: PartitionOptions = DEFAULT_PARTITION,
                 remote: RemoteOptions | None = None, in_memory: bool = False,
                 class_weights: ClassWeights | None = None,
                 fields: FieldNames = None, fields_in_memory: bool = False,
                 split: str | None = None, on_error: OnError | str = "raise") -> None:
        sample = SampleSettings(decode, size, augment, transform, with_keys)
        self._ram = in_memory_copy(path, remote) if in_memory else None  # shared RAM
        source = None if self._ram else remote_source(path, remote)
        super().__init__(self._ram.folder if self._ram else path, sample=sample,
                         chunk_size=partition.chunk_size_or(DEFAULT_CHUNK_SIZE), remote=source,
                         on_error=on_error)
        self.partition = partition
        self._init_passes(partition, shuffle=shuffle, seed=seed, batch_size=batch_size)
        # plans count its positions
        self.subset = None if split is None else Subset.open(path, self.index, split)
        self._weights = weighted_split(self, class_weights, None, self.chunk_size)
        self._check_plan()
        self._choose_fields(fields, fields_in_memory)

    def _plan_for(self, world_size: int) -> ChunkPlan:
        shuffle, drop_last, seed = self._split
        n = self.index.num_samples if self.subset is None else len(self.subset)
        if self._weights is not None:  # a per-class chunk schedule
            return self._weights.plan(n, self.chunk_size, world_size, shuffle, drop_last, seed)
        return ChunkPlan(n, self.chunk_size, world_size, shuffle, drop_last, seed)

    def _stream(self, spans: Spans, plan: ChunkPlan, where: tuple[int, int, int],
                skip: int) -> Iterator[Sample]:
        """`where`: (epoch, rank, worker) of the pass, which seed its shuffle buffer."""
        if self.subset is not None:  # positions -> samples
            spans = self.subset.sample_spans(spans)
        local = self.handles()
        rng = epoch_rng(plan.seed, *where, 2) if plan.shuffle else None
        tolerant = self.tolerant(local.reader)  # damaged samples as DamagedRecords
        reader = cast(RecordReader, tolerant) if self._skips.skipping else local.reader
        records = pass_records(reader, spans, self.buffer_size, rng, skip)
        crop = (plan.seed, where[0])
        if self.fields is None:
            for i, padded, data in records:
                _, sample = self.sample_or_pad(local.table, i, data, padded, crop, tolerant.read)
                self._seen += 1
                yield sample
            return
        for group in _groups(records, FIELD_GROUP):  # the fields of a group in one read
            source = self.field_source(local.reader)
            readable = [i for i, _, data in group if not isinstance(data, DamagedRecord)]
            dict_of = fields_ahead(source, readable, self.fields)
            k = 0  # the sample's place among the readable ones
            for i, padded, data in group:
                j, sample = self.sample_or_pad(local.table, i, data, padded, crop, tolerant.read,
                                               fields=False)
                self._seen += 1  # a pad for a skipped sample carries the pad's own fields
                yield dict_of(k, sample) if j == i else with_fields(sample, source, j, self.fields)
                k += not isinstance(data, DamagedRecord)


FIELD_GROUP = 64  # records whose fields are read together (their images one at a time)


def _groups(records: Iterator[SpanRecord], size: int) -> Iterator[list[SpanRecord]]:
    """The records in lists of `size` (the last one shorter), in order."""
    while group := list(itertools.islice(records, size)):
        yield group
