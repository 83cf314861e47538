"""The open shard files of one WdsReader: a small LRU of descriptors (and memory maps).

At most MAX_OPEN_SHARDS shards stay open (the least recently used is closed), so a
worker that walks thousands of shards stays within `ulimit -n`. Every read is checked
against the shard's size at open before it is made: a damaged table can never ask for
gigabytes, and a read past the end gets the same "truncated" error wherever it lies.

Images are read with `os.pread`. Field spans are small (two 512 B headers and a few
hundred bytes of values) and read a batch at a time, so a pread's syscall and the bytes
it returns cost as much as walking them: a shard that a second batch reads fields of
while it is open is memory-mapped (read-only; a map refused, as by a file system
without mmap, leaves it to preads), and its spans are walked in place, one
bytes copy per value (a shard read once, as when a batch's samples lie in more shards
than stay open, is not worth a map: those spans are pread). A map has its own
descriptor (Python's mmap duplicates it), so a reader that reads fields holds at most
2 * MAX_OPEN_SHARDS. The pages of a map that were read count in the process's RSS, as
those of the npy reader's memmap do: clean page cache, shared by every worker that
reads the shard, dropped by the kernel under memory pressure.

SIGBUS: touching a mapped page past the end of a file that shrank after it was mapped
kills the process (no Python exception can catch it). A mapped shard's size is checked
again (lseek to its end) once per batch that reads it, and spans are refused against the
smaller of that and its size at open, with the "truncated" error a pread would have
given; no access goes past that bound. What remains is an in-place truncation of a shard
during the short walk of one batch, the risk the npy and hdf5 readers' memmaps carry too.
Packing never truncates a shard in place (it writes a partial file and renames it, and a
renamed-over shard keeps its old inode mapped).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from packer.core.fields import FieldSpec
from packer.core.index import Index, SampleTable
from packer.errors import CorruptDatasetError
from packer.formats._wds_fields import span_values, suffixes, walked

MAX_OPEN_SHARDS = 16  # per reader, so per DataLoader worker


class _Shard:
    """One open shard: its descriptor, its size at open and, once a second batch reads
    its fields, its map."""

    __slots__ = ("fd", "map", "size", "uses")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, size
        self.map: mmap.mmap | None = None
        self.uses = 0  # batches that read its fields while it was open

    def release(self, close: Callable[[int], None]) -> None:
        """Close the descriptor and drop the map (unmapped once nothing uses it: a batch
        in progress may still hold it, so it is not closed here)."""
        close(self.fd)
        self.map = None


class OpenShards:
    """The shards a reader has open, with bounds-checked reads of byte ranges."""

    def __init__(self, folder: Path, index: Index, table: SampleTable) -> None:
        self.folder, self.index, self.table = folder, index, table
        self._open: OrderedDict[int, _Shard] = OrderedDict()

    def _get(self, shard: int) -> _Shard:
        opened = self._open.get(shard)
        if opened is not None:
            self._open.move_to_end(shard)
            return opened
        path = self.path(shard)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise CorruptDatasetError(f"{path}: shard is missing; reconvert") from exc
        except OSError as exc:
            raise CorruptDatasetError(f"{path}: cannot open ({exc.strerror}); check the file "
                                      "or reconvert") from exc
        opened = self._open[shard] = _Shard(fd, os.fstat(fd).st_size)
        while len(self._open) > MAX_OPEN_SHARDS:
            self._open.popitem(last=False)[1].release(os.close)
        return opened

    def path(self, shard: int) -> Path:
        return self.folder / self.index.shards[shard].name

    def truncated(self, shard: int, sample: int) -> CorruptDatasetError:
        return CorruptDatasetError(
            f"{self.path(shard)}: truncated at sample {sample} ({self.table.key(sample)!r}); "
            "the shard is damaged, reconvert or restore it"
        )

    def pread(self, shard: int, offset: int, size: int, sample: int) -> bytes:
        """`size` bytes at `offset` of a shard, all of them (else: the shard is truncated)."""
        opened = self._get(shard)
        if size < 0 or offset < 0 or offset + size > opened.size:
            raise self.truncated(shard, sample)
        try:
            data = os.pread(opened.fd, size, offset)
        except OSError as exc:
            raise CorruptDatasetError(f"{self.path(shard)}: cannot read ({exc.strerror}); "
                                      "restore or reconvert") from exc
        if len(data) != size:
            raise self.truncated(shard, sample)
        return data

    def mapped(self, shard: int) -> tuple[mmap.mmap | None, int]:
        """A shard's map and how far a batch may read in it (the smaller of its size at
        open and its size now), for the batch about to read; (None, 0) for a shard not
        read for fields before while open (one map costs more than a few preads), or
        one that shrank before it was mapped (a map of its size at open would fail)."""
        opened = self._get(shard)
        # lseek to the end tells the size now, cheaper than fstat (reads are preads)
        now = os.lseek(opened.fd, 0, os.SEEK_END)
        if opened.map is None:
            opened.uses += 1
            if opened.uses == 1 or opened.size == 0 or now < opened.size:
                return None, 0  # a shard shrunk since open: preads read what is left
            try:
                opened.map = mmap.mmap(opened.fd, opened.size, prot=mmap.PROT_READ)
            except (OSError, ValueError):  # a file system without mmap (ENODEV), no room
                return None, 0  # for the map, a shrink just now: preads, and their errors
        return opened.map, min(opened.size, now)

    def close(self, _close: Callable[[int], None]) -> None:
        for opened in self._open.values():
            opened.release(_close)
        self._open.clear()


def batch_values(shards: OpenShards, specs: tuple[FieldSpec, ...], indices: Sequence[int],
                 where: Sequence[int], offsets: Sequence[int], sizes: Sequence[int]
                 ) -> list[list[bytes | None]]:
    """The field values of samples `indices` (not yet checked against their digests),
    from the span at offsets[k], sizes[k] of shard where[k]: walked in the shard's map
    (`walked`), or in a pread of the span, by `span_values` where `walked` declines (a
    pax header, damage), which raises the errors. Each shard is looked up once a batch."""
    by_suffix, count = suffixes(specs), len(specs)
    maps: dict[int, tuple[mmap.mmap | None, int]] = {}
    batch: list[list[bytes | None]] = []
    for i, shard, offset, size in zip(indices, where, offsets, sizes, strict=True):
        if not size:
            batch.append([None] * count)
            continue
        source, bound = maps.get(shard) or maps.setdefault(shard, shards.mapped(shard))
        span: bytes | mmap.mmap
        if source is None:
            span, at = shards.pread(shard, offset, size, i), 0
        elif size < 0 or offset < 0 or offset + size > bound:
            raise shards.truncated(shard, i)
        else:
            span, at = source, offset
        values = walked(span, at, at + size, by_suffix, count)
        batch.append(span_values(span[at : at + size], specs, shards.path(shard))
                     if values is None else values)
    return batch
