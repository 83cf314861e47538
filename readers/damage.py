"""Reads that one damaged sample cannot spoil for its neighbours.

A format reader checks every sample against its digest and raises CorruptDatasetError,
naming the sample, its file and where in it, on the first one that does not match. A
batched read (`read_many`, `read_range`: one large read for a chunk) stops there, and
the samples after the damaged one would go unread with it. These functions keep the
batched read on the good path and, only once it fails, read the rest sample by sample,
so that each sample comes back as its bytes or as the error about itself.

Under `on_error="skip"` (`OnError`) `Skips` logs and counts each skipped
sample in a count the dataset's workers share, and `TolerantReader` hands a stream a
damaged sample as a `DamagedRecord` (empty bytes that carry the error), so the stream's
planning, shuffling and resume arithmetic stay those of bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeGuard

import torch
from torch.utils.data import get_worker_info

from packer.errors import CorruptDatasetError
from packer.formats.base import RecordReader
from readers.options import OnError

Read = bytes | CorruptDatasetError  # a sample's stored bytes, or why they cannot be read

__all__ = ["DamagedRecord", "Read", "Skips", "TolerantReader", "all_good", "each_of",
           "range_each"]

LOG = logging.getLogger("readers")
SLOTS = 64  # count cells: the main process and 63 workers each write their own


def read_one(reader: RecordReader, i: int) -> Read:
    """Sample i's bytes, or the error that names it."""
    try:
        return reader.read(i)
    except CorruptDatasetError as exc:
        return exc


def each_of(reader: RecordReader, indices: Sequence[int]) -> list[Read]:
    """`reader.read_many(indices)`; after a damaged sample, sample by sample."""
    try:
        return list(reader.read_many(indices))
    except CorruptDatasetError:
        return [read_one(reader, i) for i in indices]


def range_each(reader: RecordReader, start: int, stop: int) -> Iterator[Read]:
    """`reader.read_range(start, stop)`; from a damaged sample on, sample by sample."""
    i = start
    try:
        for data in reader.read_range(start, stop):
            yield data
            i += 1
    except CorruptDatasetError:
        for j in range(i, stop):
            yield read_one(reader, j)


def all_good(records: Sequence[Read]) -> TypeGuard[Sequence[bytes]]:
    """Whether every record was read (no damage among them)."""
    return all(isinstance(data, bytes) for data in records)


class DamagedRecord(bytes):
    """A damaged sample in a stream of stored bytes: empty, with the error about it."""

    error: CorruptDatasetError

    @classmethod
    def of(cls, error: CorruptDatasetError) -> DamagedRecord:
        record = cls()
        record.error = error
        return record


class TolerantReader:
    """The reads a stream makes (a `RecordReader`'s), with each damaged
    sample a DamagedRecord instead of an error that ends the stream.

    `fields`: the samples' fields are read too (a dataset whose samples carry fields), so
    a sample whose fields fail their digest is a DamagedRecord as well; the dataset
    reads them again for its batch (only under on_error="skip"). `damaged`: samples whose
    fields are known to fail (fields held in memory), DamagedRecords too."""

    def __init__(self, reader: RecordReader, fields: bool = False,
                 damaged: Mapping[int, CorruptDatasetError] | None = None) -> None:
        self.inner = reader
        self.fields = fields
        self.damaged = damaged or {}

    def read(self, i: int) -> bytes:
        return self.checked([read_one(self.inner, i)], [i])[0]

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        return self.checked(each_of(self.inner, indices), indices)

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        if self.fields or self.damaged:  # a span's fields in one read
            return iter(self.checked(list(range_each(self.inner, start, stop)),
                                     range(start, stop)))
        return (_record(data) for data in range_each(self.inner, start, stop))

    def checked(self, records: list[Read], indices: Sequence[int]) -> list[bytes]:
        """`records` (of samples `indices`) as bytes, a DamagedRecord where the sample or,
        with `fields`, its fields are damaged."""
        if self.fields:
            try:
                self.inner.field_values_many(indices)
            except CorruptDatasetError:
                records = [(self._fields_damage(i) or data) if isinstance(data, bytes)
                           else data for data, i in zip(records, indices, strict=True)]
        if self.damaged:
            records = [self.damaged.get(i, data) if isinstance(data, bytes) else data
                       for data, i in zip(records, indices, strict=True)]
        return [_record(data) for data in records]

    def _fields_damage(self, i: int) -> CorruptDatasetError | None:
        """The error about sample i's fields, or None when they read."""
        try:
            self.inner.field_values_many([i])
        except CorruptDatasetError as exc:
            return exc
        return None

    def prefetch(self, ranges: Sequence[Sequence[int]]) -> None:
        self.inner.prefetch(ranges)

    def stop_prefetch(self) -> None:
        self.inner.stop_prefetch()


def _record(data: Read) -> bytes:
    return DamagedRecord.of(data) if isinstance(data, CorruptDatasetError) else data


class Skips:
    """A dataset's OnError and the count of samples it skipped, in shared memory that
    forked and spawned workers write (each its own cell, so no count is lost)."""

    def __init__(self, on_error: OnError | str) -> None:
        self.policy = OnError.of(on_error)
        self._counts = torch.zeros(SLOTS, dtype=torch.int64)
        self._counts.share_memory_()  # type: ignore[no-untyped-call]

    @property
    def skipping(self) -> bool:
        return self.policy.action == "skip"

    @property
    def total(self) -> int:
        """Samples skipped so far, by every process of this dataset."""
        return int(self._counts.sum())

    def record(self, i: int, key: str, where: str, error: Exception) -> None:
        """Log and count sample i as skipped; past max_skipped, raise instead."""
        limit = self.policy.max_skipped
        if limit is not None and self.total >= limit:
            raise CorruptDatasetError(
                f"{error} (more than max_skipped={limit} samples damaged or undecodable: "
                "restore or reconvert the dataset, or raise max_skipped)") from error
        info = get_worker_info()
        self._counts[0 if info is None else 1 + info.id % (SLOTS - 1)] += 1
        LOG.warning("skipped sample %d (%r) of %s: %s", i, key, where, error)
