"""A bounded LRU of chunks of encoded records, so nearby and repeated reads skip the file.

Each process that reads (the main process, every DataLoader worker) has its own cache
of at most `max_cache_bytes` (default 256 MiB): with 8 workers that is up to 2 GiB of
encoded bytes in all. Pass `max_cache_bytes=0` to turn it off. Formats read through a
memory map (npy, hdf5, lmdb: `reader.memory_mapped`) skip it: there the OS page cache
already is the cache, shared by every worker, and copying records into a second one
only costs (a dataset's per-process handles give such a reader a budget of 0).

Why chunks, and why not always whole chunks: a sampler that stays local (ChunkSampler,
SequentialSampler) touches every sample of a chunk within a short while, so one large
`read_range` per chunk replaces hundreds of small reads (for tar shards, one `pread`).
A plain RandomSampler over a large dataset touches a chunk once per epoch, and reading
a whole chunk for one sample would multiply the bytes read by the chunk size. So a miss
reads only the samples asked for and keeps them in the chunk's entry; once a chunk has
been asked for `promote_at` distinct samples (1/8 of a chunk, at least 2) within a
window of `4 * chunk_size` requests, the rest of it is read in one go. Local access
reaches that mark within a chunk or two of requests and then reads each chunk almost
entirely sequentially; random access practically never does (a chunk of 64 out of
10,000 samples is asked for 1.6 times per 256 requests), so it never reads what it does
not use.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from packer.formats.base import RecordReader
from readers.damage import Read, all_good, each_of, range_each
from readers.options import check_budget

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
# What holding one record costs beyond its bytes: the bytes object's header and its
# dict slot and key. Counted, so many tiny records take their real share of the budget,
# not only their bytes.
RECORD_OVERHEAD = 120


@dataclass
class Entry:
    """The records of one chunk held so far; `complete` once the whole chunk was read."""

    records: dict[int, bytes] = field(default_factory=dict)
    complete: bool = False
    num_bytes: int = 0
    since: int = 0  # the request count when the current locality window began ...
    recent: int = 0  # ... and the distinct samples asked for since then


class ChunkCache:
    """Least recently used chunks, evicted to stay within `max_bytes` of memory."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = check_budget("max_cache_bytes", max_bytes, "off")
        self.num_bytes = 0
        self._entries: OrderedDict[int, Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, chunk: int) -> Entry | None:
        """The chunk's entry, now the most recently used, or None."""
        entry = self._entries.get(chunk)
        if entry is not None:
            self._entries.move_to_end(chunk)
        return entry

    def add(self, chunk: int, records: dict[int, bytes], complete: bool = False) -> None:
        """Merge records into the chunk's entry, then evict the oldest chunks over budget."""
        entry = self._entries.pop(chunk, None) or Entry()
        self.num_bytes -= entry.num_bytes
        held = entry.records
        entry.num_bytes += sum(len(data) + RECORD_OVERHEAD for i, data in records.items()
                               if i not in held)  # only what is new: no rescan per add
        held.update(records)
        entry.complete = entry.complete or complete
        if entry.num_bytes > self.max_bytes:
            return
        self._entries[chunk] = entry
        self.num_bytes += entry.num_bytes
        while self.num_bytes > self.max_bytes:
            _, oldest = self._entries.popitem(last=False)
            self.num_bytes -= oldest.num_bytes


class CachedReader:
    """Reads records through a ChunkCache with the promotion rule described above.

    A damaged sample costs only itself: a chunk whose read met one
    keeps its good samples, is never read whole again, and the damaged sample comes back
    as the error that names it (`read_each`) or raises it (`read_many`); errors are
    never cached.
    """

    def __init__(self, reader: RecordReader, num_samples: int, chunk_size: int,
                 cache_bytes: int) -> None:
        self.reader = reader
        self.num_samples = num_samples
        self.chunk_size = chunk_size
        self.cache = ChunkCache(cache_bytes)
        self.promote_at = max(2, chunk_size // 8)
        self.window = 4 * chunk_size
        self.clock = 0  # samples requested so far
        self.damaged: set[int] = set()  # chunks whose whole read met a damaged sample

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        """The stored bytes of `indices`, in order; raises for the first damaged one."""
        records = self.read_each(indices)
        for data in records:
            if not isinstance(data, bytes):
                raise data
        return cast(list[bytes], records)

    def read_each(self, indices: Sequence[int]) -> list[Read]:
        """Each sample's stored bytes, or the error about it; one reader.read_many for
        the scattered ones."""
        if self.cache.max_bytes == 0:
            return each_of(self.reader, indices)
        self.clock += len(indices)
        found: dict[int, Read] = {}
        missing: dict[int, set[int]] = {}
        for i in indices:
            entry = self.cache.get(i // self.chunk_size)
            data = entry.records.get(i) if entry is not None else None
            if data is None:
                missing.setdefault(i // self.chunk_size, set()).add(i)
            else:
                found[i] = data
        scattered: list[int] = []
        for chunk, wanted in missing.items():
            if chunk not in self.damaged and self._local_enough(chunk, len(wanted)):
                found.update(self._read_chunk(chunk))
            else:
                scattered.extend(sorted(wanted))
        found.update(self._read_scattered(scattered))
        return [found[i] for i in indices]

    def _local_enough(self, chunk: int, wanted: int) -> bool:
        """Whether this chunk was asked for `promote_at` samples within the window."""
        entry = self.cache.get(chunk)
        if entry is None:
            return wanted >= self.promote_at
        if self.clock - entry.since > self.window:
            entry.since, entry.recent = self.clock, 0
        return entry.recent + wanted >= self.promote_at

    def _read_chunk(self, chunk: int) -> dict[int, Read]:
        start = chunk * self.chunk_size
        stop = min(start + self.chunk_size, self.num_samples)
        records = dict(zip(range(start, stop), range_each(self.reader, start, stop),
                           strict=True))
        if all_good(list(records.values())):
            self.cache.add(chunk, cast(dict[int, bytes], records), complete=True)
            return records
        self.damaged.add(chunk)
        self.cache.add(chunk, _good(records))
        return records

    def _read_scattered(self, indices: list[int]) -> dict[int, Read]:
        if not indices:
            return {}
        records = dict(zip(indices, each_of(self.reader, indices), strict=True))
        by_chunk: dict[int, dict[int, bytes]] = {}
        for i, data in _good(records).items():
            by_chunk.setdefault(i // self.chunk_size, {})[i] = data
        for chunk, part in by_chunk.items():
            self.cache.add(chunk, part)
            entry = self.cache.get(chunk)
            if entry is not None:
                if entry.recent == 0:
                    entry.since = self.clock
                entry.recent += len(part)
        return records


def _good(records: dict[int, Read]) -> dict[int, bytes]:
    """The records that were read, without the damaged ones."""
    return {i: data for i, data in records.items() if isinstance(data, bytes)}
