"""What one dataset reads through in one process: the folder's shared reader
(packer.dataset.open, one registry for every reader of a folder in the process, closed in
a forked child and reopened on first read) plus this dataset's own chunk cache, batched
gather and, for a URL, the mirror that fetches shards on demand.

Handles never travel through pickle (readers.datasets).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from packer.core.index import Index
from packer.dataset.open import Identity, Wrap, identity, is_current, opened, release
from packer.formats.base import RecordReader
from readers.batching.collate import Gatherer
from readers.ram.chunk_cache import CachedReader
from readers.remote import RemoteSource, remote_reader

__all__ = ["Handles", "Identity", "identity", "release"]


class Handles:
    """What one dataset reads through in one process: the shared reader plus its own cache."""

    def __init__(self, key: Identity, chunk_size: int, cache_bytes: int,
                 remote: RemoteSource | None = None) -> None:
        self.opened = opened(key, None if remote is None else _mirrored(remote))
        self.table = self.opened.table
        self.reader = self.opened.shared()
        if self.reader.memory_mapped:
            cache_bytes = 0  # the page cache already holds it (readers.ram.chunk_cache)
        self.cached = CachedReader(self.reader, len(self.table), chunk_size, cache_bytes)
        # npy rows: a batch in one gather (readers.batching.collate)
        self.gather = cast(Gatherer, self.reader) if self.reader.gathers_rows else None

    def current(self, key: Identity) -> bool:
        """Whether these handles are still this process's for `key` (not after a fork, not
        after `release`)."""
        return self.opened.key == key and is_current(self.opened)


def _mirrored(remote: RemoteSource) -> Wrap:
    """A URL's mirror around the format's reader: shards are fetched on demand."""
    def wrap(open_reader: Callable[[], RecordReader], index: Index) -> RecordReader:
        return remote_reader(open_reader, remote, index)
    return wrap
