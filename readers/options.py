"""Option values the readers take, grouped by what they set.

    PartitionOptions  how an epoch is split into chunks, ranks and a shuffle window:
                      one value for PackedIterableDataset and ChunkSampler alike
    RemoteOptions     where a URL dataset's shards are cached on disk, and the fsspec options
    OnError           what a dataset does with a damaged or undecodable sample: raise, skip

All are frozen and checked when built, so a bad value fails at the call that made it.
The everyday settings (shuffle, seed, decode, size, augment, transform, with_keys) stay
plain keyword arguments of the datasets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args


def check_budget(name: str, value: int, zero: str) -> int:
    """`value` if it is a byte budget (0 or more), else the one-line error that names the
    argument and what 0 means for it; every cache budget is checked here."""
    if value < 0:
        raise ValueError(f"{name} must be 0 ({zero}) or more, not {value}")
    return value


DEFAULT_CHUNK_SIZE = 64
PartitionBy = Literal["auto", "readers", "framework"]
PARTITION_BY: tuple[PartitionBy, ...] = get_args(PartitionBy)
DEFAULT_BUFFER_SIZE = 1024


@dataclass(frozen=True, slots=True)
class PartitionOptions:
    """How an epoch's samples are cut into chunks and dealt to ranks.

    `drop_last`: drop the tail that would leave ranks uneven (True), or pad the short
    ranks with repeats labelled PAD_LABEL (False). `rank`/`world_size`: None reads the
    process group when a pass starts. `chunk_size`: samples per chunk, the
    unit of locality; None is PackedDataset's own chunk size for ChunkSampler, and 64 for
    PackedIterableDataset. `buffer_size`: the shuffle window, in samples (0: chunk order).
    `by`: who splits across ranks: "auto" finds out (a framework splitter that asks, as
    Accelerate's prepare makes them, else the readers),
    "readers" or "framework" say it where finding out cannot work.
    """

    drop_last: bool = True
    rank: int | None = None
    world_size: int | None = None
    chunk_size: int | None = None
    buffer_size: int = DEFAULT_BUFFER_SIZE
    by: PartitionBy = "auto"

    def __post_init__(self) -> None:
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, not {self.chunk_size}")
        if self.buffer_size < 0:
            raise ValueError(f"buffer_size must be 0 (chunk order only) or more, "
                             f"not {self.buffer_size}")
        if self.by not in PARTITION_BY:
            raise ValueError(f"by must be one of {', '.join(map(repr, PARTITION_BY))}, "
                             f"not {self.by!r}")

    def chunk_size_or(self, default: int) -> int:
        return default if self.chunk_size is None else self.chunk_size


DEFAULT_PARTITION = PartitionOptions()


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    """Where a URL dataset (s3://, gs://, file://...) is cached, and how it is reached.

    `cache_dir`: the shard cache folder (None: `packer-cache-<uid>` in the system's temporary
    folder, `tempfile.gettempdir()`).
    `max_cache_bytes`: the disk budget of that folder, shared by the processes of the
    machine; least recently used shards are evicted beyond it (None: 8 GiB).
    `storage_options`: passed to fsspec (credentials, endpoint_url, ...).
    `prefetch_shards`: shards fetched ahead of the reader, each by its own thread, within
    the budget (0: fetch only what a read needs, when it needs it).
    """

    cache_dir: str | Path | None = None
    max_cache_bytes: int | None = None
    storage_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    prefetch_shards: int = 2

    def __post_init__(self) -> None:
        if self.max_cache_bytes is not None:
            check_budget("RemoteOptions.max_cache_bytes", self.max_cache_bytes,
                         "pinned shards only")
        if self.prefetch_shards < 0:
            raise ValueError(f"prefetch_shards must be 0 (off) or more, "
                             f"not {self.prefetch_shards}")


Action = Literal["raise", "skip"]


@dataclass(frozen=True, slots=True)
class OnError:
    """What a dataset does with a damaged sample (its bytes fail their digest) or one that
    does not decode.

    `action`: "raise" (the default) stops the read with the error that names the sample,
    its file and where in it. "skip" logs one warning a sample (logger "readers": key,
    file, reason), counts it (the dataset's `num_skipped`, summed over its workers) and
    serves a flagged pad in its place, exactly as `PartitionOptions(drop_last=False)` pads: a
    nearby good sample with label PAD_LABEL, so every other sample is still read exactly
    once and every rank makes the same number of batches. `max_skipped`: with "skip",
    the most samples a dataset may skip (all its workers and epochs together) before
    the next one raises; None is no limit.
    """

    action: Action = "raise"
    max_skipped: int | None = None

    def __post_init__(self) -> None:
        if self.action not in get_args(Action):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {self.action!r}")
        if self.max_skipped is not None and self.max_skipped < 0:
            raise ValueError(f"max_skipped must be 0 or more (None: no limit), "
                             f"not {self.max_skipped}")

    @classmethod
    def of(cls, value: OnError | str) -> OnError:
        """`value` as an OnError: "raise" and "skip" name the action."""
        return value if isinstance(value, OnError) else cls(value)  # type: ignore[arg-type]
