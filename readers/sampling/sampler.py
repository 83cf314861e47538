"""ChunkSampler: a DDP sampler for map-style datasets that keeps reads local.

DistributedSampler permutes single indices, so consecutive reads land anywhere in the
files. ChunkSampler permutes chunks (a `ChunkPlan`), gives every rank the same
number of indices (each sample exactly once per epoch across ranks, modulo the
drop/pad rule), and shuffles only within a bounded window, so a PackedDataset's chunk
cache serves most reads from a few large sequential ones.

Padding (`partition=PartitionOptions(drop_last=False)`) yields `PaddedIndex` values: ints that
PackedDataset turns into samples with label `PAD_LABEL` (-1), so evaluation can mask them
out (`labels >= 0`) and `CrossEntropyLoss(ignore_index=PAD_LABEL)` skips them.

`state_dict()` / `load_state_dict()` resume an epoch mid-way.

Training frameworks: ChunkSampler is a `DistributedSampler`, so Lightning keeps it as it is
(it wraps any other sampler in its own distributed sampler, which would split the ranks'
shares again) and calls its `set_epoch`. The rank is resolved when a pass starts, not at
construction, and a pass that no `set_epoch` named takes the epoch after the previous
pass's, so a loop that never calls it still gets a new order every epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sized
from itertools import islice
from typing import Any

import numpy.typing as npt
from torch.utils.data import DistributedSampler

from readers.options import DEFAULT_CHUNK_SIZE, DEFAULT_PARTITION, PartitionOptions
from readers.passes.loop import LoopState, loop_state
from readers.passes.partition_owner import OwnedSplit
from readers.passes.resume import (
    PendingResume,
    pending_from_state,
    stream_state,
)
from readers.passes.stream import rest_after
from readers.passes.world import LateWorld
from readers.plan.chunks import (
    ChunkPlan,
    Spans,
    buffered_shuffle,
    check_epoch,
    epoch_rng,
    expand,
    num_in,
)
from readers.plan.elastic import piece
from readers.sampling.weighted import ClassWeights, weighted_split

PAD_LABEL = -1
PassStart = tuple[int, ChunkPlan, int, Spans, int]  # (epoch, plan, rank, spans, skip)


class PaddedIndex(int):
    """A sample index repeated only to even out the ranks; it survives pickling as such."""

    def __repr__(self) -> str:
        return f"PaddedIndex({int(self)})"


class ChunkSampler(OwnedSplit, DistributedSampler[int]):  # type: ignore[override]  # rank
    """Yields this rank's indices chunk by chunk, shuffled within `buffer_size` indices.

    The order depends only on (seed, epoch), so every rank agrees without communicating;
    `set_epoch(e)` names the coming epoch, as with DistributedSampler (without it, each
    pass takes the next epoch). Chunks are the dataset's `chunk_size` (PackedDataset's
    cache unit). The default window of 1024 indices spans about 16 chunks of 64, which a
    256 MiB cache holds for images up to ~250 KB; a larger window mixes classes better
    (index order is sorted by key) but needs a larger `max_cache_bytes` to keep reads
    sequential. `partition=PartitionOptions(buffer_size=..., rank=..., world_size=...)`: rank and
    world size default to the process group's when a pass starts. Under Accelerate's
    `prepare` the framework splits the batches across ranks and the sampler yields the
    whole epoch.
    """

    def __init__(self, dataset: Sized, *, shuffle: bool = True, seed: int = 0,
                 partition: PartitionOptions = DEFAULT_PARTITION,
                 class_weights: ClassWeights | None = None,
                 sample_weights: npt.ArrayLike | None = None) -> None:
        # DistributedSampler.__init__ would ask the process group now: it may not exist yet
        self.dataset = dataset  # type: ignore[assignment]  # any Sized, as Sampler takes
        self.partition, self._split_by = partition, partition.by
        self._world = LateWorld.of(partition.rank, partition.world_size)
        own_chunk_size = getattr(dataset, "chunk_size", DEFAULT_CHUNK_SIZE)
        self._chunk_size = partition.chunk_size_or(own_chunk_size)
        self._args = (len(dataset), shuffle, partition.drop_last, seed)
        self._weights = weighted_split(dataset, class_weights, sample_weights, self._chunk_size)
        self.shuffle, self.drop_last, self.seed = shuffle, partition.drop_last, seed
        self._check_plan()
        self.buffer_size = partition.buffer_size
        self._next_epoch = 0
        self._resume: PendingResume | None = None
        self._pass_epoch: int | None = None  # the epoch of the latest pass, and its count
        self._yielded = 0
        self._pass_world = self.world_size  # the world size of the latest pass
        self._loaded: LoopState | None = None  # the loaded state, as a loop state ...
        self._resumed_from: LoopState | None = None  # ... that the latest pass re-split
        self._untouched: PassStart | None = None  # the latest pass, while none of it is drawn

    def _plan_for(self, world_size: int) -> ChunkPlan:
        num_samples, shuffle, drop_last, seed = self._args
        if self._weights is not None:  # class or sample weights: what each epoch draws
            return self._weights.plan(num_samples, self._chunk_size, world_size, shuffle,
                                      drop_last, seed)
        return ChunkPlan(num_samples, self._chunk_size, world_size, shuffle, drop_last, seed)

    @property
    def num_replicas(self) -> int:  # type: ignore[override]
        """DistributedSampler's name for world_size."""
        return self.world_size

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """DistributedSampler's name for the indices this rank yields per epoch."""
        return len(self)

    @property
    def total_size(self) -> int:  # type: ignore[override]
        return len(self) * self.world_size

    @property
    def epoch(self) -> int:  # type: ignore[override]
        """The epoch of the coming pass."""
        return self._next_epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the permutation of the coming epoch (the same on every rank)."""
        self._next_epoch = check_epoch(epoch)
        self._untouched = None

    def __iter__(self) -> Iterator[int]:
        """This epoch's indices, less those a loaded state says were seen (the first ones).

        Not a generator itself: the count restarts when the pass is created, so a
        state_dict() taken before its first index (StatefulDataLoader does) is right. A pass
        dropped before its first index gives its epoch and its resume to the next pass
        (torchdata's StatefulDataLoader creates a sampler iterator twice per pass).
        """
        start = self._untouched
        if start is None:
            start = self._start_pass()
        epoch, plan, rank, spans, skip = start
        self._untouched = start if num_in(spans) > skip else None  # nothing to draw: done
        self._pass_epoch, self._yielded, self._pass_world = epoch, skip, plan.world_size
        # a dataset with set_epoch (PackedDataset's crops) learns the epoch here, in the main
        # process before any index reaches a worker: Lightning calls set_epoch on the sampler only
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
        indices, padded = expand(spans)
        stream: Iterator[int] = (
            PaddedIndex(i) if pad else int(i)
            for i, pad in zip(indices.tolist(), padded.tolist(), strict=True)
        )
        if plan.shuffle:
            rng = epoch_rng(plan.seed, epoch, rank, 1)
            stream = buffered_shuffle(stream, self.buffer_size, rng)
        return self._counted(islice(stream, skip, None))

    def _start_pass(self) -> PassStart:
        """The epoch, plan, rank, spans and skip of a new pass (the epoch is used up)."""
        rank, world_size = self._world_for_pass(self._view())
        plan = self._plan_for(world_size)
        epoch, self._next_epoch = self._next_epoch, self._next_epoch + 1
        spans, skip = self._spans(plan, epoch, rank)
        return epoch, plan, rank, spans, skip

    def _spans(self, plan: ChunkPlan, epoch: int, rank: int) -> tuple[Spans, int]:
        """This rank's spans of the pass and how many of its indices a resume skips; a
        state saved on another world size gives the rest of its epoch, re-split."""
        resume, self._resumed_from = self._resume, None
        if resume is None:
            return plan.rank_spans(epoch, rank), 0
        elastic = resume.elastic_for(epoch, plan.world_size, None, None)
        if elastic is None:
            return plan.rank_spans(epoch, rank), resume.take(epoch, 0, plan.num_per_rank)
        self._resumed_from = self._loaded
        rest = rest_after(self._plan_for(elastic[0].world_size), elastic, epoch,
                          self.buffer_size, per_worker=False)
        return piece(rest, plan.world_size, plan.drop_last, rank, 0, 1, None), 0

    def _counted(self, stream: Iterator[int]) -> Iterator[int]:
        for i in stream:
            self._untouched = None
            self._yielded += 1
            yield i

    def state_dict(self) -> dict[str, Any]:
        """{"epoch", "seed", "samples_seen", "world_size"}: indices drawn from this sampler
        this epoch, on that many ranks; it loads on any world size.

        Drawn is not consumed: a DataLoader draws the indices of the batches it prefetches.
        StatefulDataLoader stores this with each batch it sends, which makes it exact; with
        a plain DataLoader save `loop_state(...)` from the loop instead. A
        pass that read a re-split rest (its state came from another world size) reports the
        loop state of its stream, with the state it resumed from (`resumed_from`).
        """
        epoch = self._next_epoch if self._pass_epoch is None else self._pass_epoch
        if self._resumed_from is not None and self._pass_epoch is not None:
            return {**loop_state(epoch, self._yielded, 1, 0, world_size=self._pass_world,
                                 resumed_from=self._resumed_from), "seed": self.seed}
        return {"epoch": epoch, "seed": self.seed, "samples_seen": self._yielded,
                "world_size": self._pass_world}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass be state["epoch"], less the indices already seen.

        Takes `state_dict()` or `loop_state(...)`. A later `set_epoch` to another epoch
        raises if the state stops mid-epoch and ignores a finished one.
        """
        self._resume = pending_from_state(state, self.seed, self._per_rank, here=None,
                                          per_worker=False, world_now=self.world_size)
        saved = int(state.get("world_size", self.world_size))
        self._loaded = stream_state(state, saved) if "epoch" in state else None
        self._next_epoch = self._resume.epoch
        self._untouched = None
