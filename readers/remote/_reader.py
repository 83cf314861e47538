"""RemoteReader: the format's RecordReader over a mirror, pinning what each read needs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from packer import formats
from packer.core.index import Index
from packer.formats.base import RecordReader
from readers.remote._cache import ShardCache
from readers.remote._mirror import RemoteSource


class RemoteReader:
    """A RecordReader over a mirror: pins the shards a read needs, then reads locally.

    When a shard is unpinned the format reader is closed (it reopens lazily), so it never
    holds a descriptor of a shard that eviction may delete.
    """

    memory_mapped = False  # shards come and go from the disk cache: the chunk cache helps
    gathers_rows = False

    def __init__(self, inner: RecordReader, cache: ShardCache) -> None:
        self.inner = inner
        self.cache = cache
        self.index = cache.index

    def _trim(self) -> None:
        if self.cache.trim():
            self.inner.close()

    def read(self, i: int) -> bytes:
        self.cache.pin(self.index.shard_of(i))
        data = self.inner.read(i)
        self._trim()
        return data

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        if not len(indices):
            return []
        self._pin_shards(indices)
        data = self.inner.read_many(indices)
        self._trim()
        return data

    def _pin_shards(self, indices: Sequence[int]) -> None:
        shards = np.searchsorted(self.index.shard_starts, np.asarray(indices), side="right") - 1
        for shard in sorted({int(s) for s in shards}):
            self.cache.pin(shard)

    def fields(self, i: int, names: Sequence[str] | None = None) -> dict[str, object]:
        """Sample i's fields, read as its bytes are: its shard pinned."""
        self.cache.pin(self.index.shard_of(i))
        values = self.inner.fields(i, names)
        self._trim()
        return values

    def fields_many(self, indices: Sequence[int], names: Sequence[str] | None = None
                    ) -> list[dict[str, object]]:
        """The fields of several samples, their shards pinned as read_many pins them."""
        self._pin_shards(indices)
        values = self.inner.fields_many(indices, names)
        self._trim()
        return values

    def field_values_many(self, indices: Sequence[int]) -> Sequence[Sequence[bytes | None]]:
        """The checked field values of several samples (as a `RecordReader` gives them),
        their shards pinned as read_many pins them."""
        self._pin_shards(indices)
        values = self.inner.field_values_many(indices)
        self._trim()
        return values

    def prefetch(self, ranges: Sequence[Sequence[int]]) -> None:
        """Fetch in the background the shards of the coming (start, stop, ...) ranges:
        the first `prefetch_shards` of them that are not on disk yet."""
        wanted: list[int] = []
        for start, stop, *_ in ranges:
            if start >= stop:
                continue
            for shard in (self.index.shard_of(start), self.index.shard_of(stop - 1)):
                if shard not in wanted and shard not in self.cache.pinned:
                    wanted.append(shard)
            if len(wanted) >= self.cache.source.prefetch_shards:
                break
        for shard in wanted[:self.cache.source.prefetch_shards]:
            self.cache.prefetch(shard)

    def stop_prefetch(self) -> None:
        """End the prefetch threads and wait for them: the pass that showed the coming
        spans is over, so none is left to end at a random moment."""
        self.cache.stop_prefetch()

    def read_range(self, start: int, stop: int) -> Iterator[bytes]:
        i = start
        while i < stop:
            shard = self.index.shard_of(i)
            end = min(stop, int(self.index.shard_starts[shard + 1]))
            if end < stop:  # the span goes on into the next shard(s)
                self.prefetch([(end, stop)])
            self.cache.pin(shard)
            yield from self.inner.read_range(i, end)
            self._trim()
            i = end

    def close(self) -> None:
        self.inner.close()
        self.cache.close()


def remote_reader(open_reader: Callable[[], RecordReader], source: RemoteSource,
                  index: Index) -> RemoteReader:
    """Wrap the format's reader of the mirror, opened by `open_reader`.

    A one-file format (lmdb, hdf5, npy) opens its file right away, and every part an
    append added, so its shards are fetched and pinned first,
    for as long as the reader lives.
    """
    cache = ShardCache(source, index)
    if len(index.shards) == 1 or formats.load(index.format).OPENS_EVERY_SHARD:
        cache.max_pinned = max(cache.max_pinned, len(index.shards))
        for shard in range(len(index.shards)):
            cache.pin(shard)
    try:
        return RemoteReader(open_reader(), cache)
    except BaseException:
        cache.close()
        raise
