"""ChunkSampler: a DDP sampler for map-style datasets that keeps reads local.

DistributedSampler permutes single indices, so consecutive reads land anywhere in the
files. ChunkSampler permutes chunks (see `readers.sharding`), gives every rank the same
number of indices (each sample exactly once per epoch across ranks, modulo the
drop/pad rule), and shuffles only within a bounded window, so a PackedDataset's chunk
cache serves most reads from a few large sequential ones.

Padding (drop_last=False) yields `PaddedIndex` values: ints that PackedDataset turns
into samples with label `PAD_LABEL` (-1), so evaluation can mask them out
(`labels >= 0`) and `CrossEntropyLoss(ignore_index=PAD_LABEL)` skips them.

`state_dict()` / `load_state_dict()` resume an epoch mid-way (see readers.resume).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from itertools import islice
from typing import Any

import torch.distributed as dist
from torch.utils.data import Sampler

from readers.resume import PendingResume, pending_from_state
from readers.sharding import ShardPlan, buffered_shuffle, check_epoch, epoch_rng, expand

PAD_LABEL = -1
DEFAULT_CHUNK_SIZE = 64
DEFAULT_BUFFER_SIZE = 1024


class PaddedIndex(int):
    """A sample index repeated only to even out the ranks; it survives pickling as such."""

    def __repr__(self) -> str:
        return f"PaddedIndex({int(self)})"


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit arguments win; else torch.distributed when initialized; else rank 0 of 1.

    Arguments first, as in DistributedSampler, so a caller can split differently from
    the process group (for example one split per node).
    """
    if rank is None or world_size is None:
        initialized = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if initialized else 0
        if world_size is None:
            world_size = dist.get_world_size() if initialized else 1
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")
    return rank, world_size


class ChunkSampler(Sampler[int]):
    """Yields this rank's indices chunk by chunk, shuffled within `buffer_size` indices.

    Call `set_epoch(e)` before each epoch, as with DistributedSampler; the order depends
    only on (seed, epoch), so every rank agrees without communicating. Chunks are the
    dataset's `chunk_size` (PackedDataset's cache unit). The default window of 1024
    indices spans about 16 chunks of 64, which a 256 MiB cache holds for images up to
    ~250 KB; a larger window mixes classes better (index order is sorted by key) but
    needs a larger `cache_bytes` to keep reads sequential.
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = True, rank: int | None = None,
                 world_size: int | None = None, *,
                 buffer_size: int = DEFAULT_BUFFER_SIZE) -> None:
        self.rank, self.world_size = resolve_rank(rank, world_size)
        chunk_size = getattr(dataset, "chunk_size", DEFAULT_CHUNK_SIZE)
        self.plan = ShardPlan(len(dataset), chunk_size, self.world_size, shuffle, drop_last, seed)
        if buffer_size < 0:
            raise ValueError(f"buffer_size must be 0 (no shuffle within chunks) or more, "
                             f"not {buffer_size}")
        self.buffer_size = buffer_size
        self.epoch = 0
        self._resume: PendingResume | None = None
        self._pass_epoch: int | None = None  # the epoch of the latest pass, and its count
        self._yielded = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the permutation of the coming epoch (the same on every rank)."""
        self.epoch = check_epoch(epoch)

    def __len__(self) -> int:
        return self.plan.num_per_rank

    def __iter__(self) -> Iterator[int]:
        """This epoch's indices, less those a loaded state says were seen (the first ones).

        Not a generator itself: the count restarts when the pass is created, so a
        state_dict() taken before its first index (StatefulDataLoader does) is right.
        """
        epoch = self.epoch
        skip = self._resume.take(epoch, 0, len(self)) if self._resume is not None else 0
        self._pass_epoch, self._yielded = epoch, skip
        indices, padded = expand(self.plan.rank_spans(epoch, self.rank))
        stream: Iterator[int] = (
            PaddedIndex(i) if pad else int(i)
            for i, pad in zip(indices.tolist(), padded.tolist(), strict=True)
        )
        if self.plan.shuffle:
            rng = epoch_rng(self.plan.seed, epoch, self.rank, 1)
            stream = buffered_shuffle(stream, self.buffer_size, rng)
        return self._counted(islice(stream, skip, None))

    def _counted(self, stream: Iterator[int]) -> Iterator[int]:
        for i in stream:
            self._yielded += 1
            yield i

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "seed", "samples_seen"}: indices drawn from this sampler this epoch.

        Drawn is not consumed: a DataLoader draws the indices of the batches it prefetches.
        StatefulDataLoader stores this with each batch it sends, which makes it exact; with
        a plain DataLoader save `readers.resume.loop_state(...)` from the loop instead.
        """
        epoch = self.epoch if self._pass_epoch is None else self._pass_epoch
        return {"epoch": epoch, "seed": self.plan.seed, "samples_seen": self._yielded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass over state["epoch"] skip the indices already seen.

        Takes `state_dict()` or `loop_state(...)`. Call `set_epoch` as usual: a pass of
        another epoch raises if the state stops mid-epoch and ignores a finished one.
        """
        self._resume = pending_from_state(state, self.plan.seed, self.plan.num_per_rank,
                                          here=None, per_worker=False)
