"""Option values the readers take, grouped by what they set.

    PartitionOptions   how an epoch is split into chunks, ranks and a shuffle window:
                   one value for PackedIterableDataset and ChunkSampler alike
    RemoteOptions  where a URL dataset's shards are cached on disk, and the fsspec options
    OnError        what a dataset does with a damaged or undecodable sample: raise, skip

All are frozen and checked when built, so a bad value fails at the call that made it.
The everyday settings (shuffle, seed, decode, size, augment, transform, with_keys) stay
plain keyword arguments of the datasets.
"""

from readers.options.values import (
    DEFAULT_BUFFER_SIZE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PARTITION,
    OnError,
    PartitionOptions,
    RemoteOptions,
)

__all__ = [
    "DEFAULT_BUFFER_SIZE",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_PARTITION",
    "OnError",
    "PartitionOptions",
    "RemoteOptions",
]
