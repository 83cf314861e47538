"""Read a packed dataset behind a URL (s3://, file://, any fsspec protocol) through a disk cache.

    cache_dir/<url hash>-<index hash>/      a local mirror of the dataset, shards on demand
        index.json samples.npy keys.npy     fetched when the dataset object is created
        photos-00007.tar ...                fetched on first read; least recently used
                                            shards evicted beyond max_cache_bytes
        .locks/00007.use  .locks/00007.get  flock files: "in use" and "being fetched"

The mirror opens with the ordinary format readers; RemoteReader wraps the format's reader
and makes sure the shards a read needs are on disk first. Every file arrives under a
temporary name and is renamed once complete, so no process ever sees part of one.

All processes on a machine (DataLoader workers, DDP ranks) share one mirror, so a shard
is fetched once however many workers read from it:

- pinning: a process holds a shared flock on `NNNNN.use` of each shard it reads (its
  MAX_PINNED most recent ones); eviction takes that lock exclusively without waiting,
  so a pinned shard is never deleted under a reader.
- fetching: an exclusive flock on `NNNNN.get`; whoever gets it second finds the shard there.
- recency: a pin touches the file's mtime; eviction removes the oldest unpinned shards
  until the complete shards fit in `max_cache_bytes`. Pinned shards stay, so the disk can
  hold up to MAX_PINNED shards per reading process on top of `max_cache_bytes`.

Nothing here travels through pickle but the RemoteSource (a URL, options and paths); the
filesystem object and the lock descriptors live in the process that reads. Nothing is
ever written to the URL.

The parts, each testable alone:
    _mirror    RemoteSource, open_remote: the mirror folder and its metadata
    _locks     the per-shard flock files, fork-safe
    _eviction  victims(): which shards to delete, a pure function of what is on disk
    _cache     ShardCache (pin, fetch, evict) and its Prefetcher threads
    _reader    RemoteReader: a RecordReader over the mirror
"""

from readers.remote._cache import MAX_PINNED, Prefetcher, ShardCache
from readers.remote._mirror import (
    DEFAULT_DISK_CACHE_BYTES,
    RemoteSource,
    default_cache_dir,
    open_remote,
)
from readers.remote._reader import RemoteReader, remote_reader

__all__ = ["DEFAULT_DISK_CACHE_BYTES", "MAX_PINNED", "Prefetcher",
           "RemoteReader", "RemoteSource", "ShardCache", "default_cache_dir", "open_remote",
           "remote_reader"]
