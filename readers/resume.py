"""Resume an epoch mid-way: exactly the samples not yet seen, in the order they would have come.

Every order here is a pure function of (seed, epoch, rank, worker, num_workers): the chunk
plan (`readers.sharding`) and the shuffle buffer's generator, `epoch_rng(seed, epoch, rank,
worker, 2)` for a PackedIterableDataset worker and `(seed, epoch, rank, 1)` for a
ChunkSampler. The buffer draws the same numbers whatever the items are, so the order of a
pass is known before reading a byte, and a position in an epoch is one count per process
that iterates:

    ChunkSampler           {"epoch", "seed", "samples_seen"}                (main process)
    PackedIterableDataset  {"epoch", "seed", "samples_seen", "worker", "num_workers"}
                                                                 (each DataLoader worker)

Counts are equal on every rank (each rank yields the same number of batches), so a state
saved on one rank resumes any rank.

What counts is what the training loop consumed, not what was produced, and a DataLoader
runs ahead (the sampler's indices for prefetched batches, workers' prefetched batches).
Two ways to get it right:

- torchdata's `StatefulDataLoader` takes each worker's `state_dict()` with the batch it
  sends and keeps the snapshot that goes with the last batch the loop received: save and
  load the loader's state, nothing else.
- With a plain DataLoader, the loop counts the batches it consumed and saves
  `loop_state(epoch, batches_consumed, batch_size, num_workers)`; both readers load it.
  Map-style batches arrive in sampler order: `batches * batch_size` indices. Iterable: the
  DataLoader asks worker k for batches k, k+W, k+2W, ... (round robin; a worker that runs
  out leaves the rotation; `in_order=True`, the default), so the batch count maps to an
  exact count per worker (`samples_per_worker`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from readers.sharding import (
    check_epoch,
    worker_bounds,
)


def loop_state(epoch: int, batches_consumed: int, batch_size: int, num_workers: int = 0,
               drop_last: bool = False) -> dict[str, int]:
    """What a training loop over a plain DataLoader saves to resume mid-epoch.

    `drop_last` is the DataLoader's (it decides how many batches each worker makes).
    """
    for name, value in (("batches_consumed", batches_consumed), ("num_workers", num_workers)):
        if value < 0:
            raise ValueError(f"{name} must be 0 or more, not {value}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    return {"epoch": check_epoch(epoch), "batches_consumed": batches_consumed,
            "batch_size": batch_size, "num_workers": num_workers, "drop_last": int(drop_last)}


def samples_per_worker(num_per_rank: int, batches_consumed: int, batch_size: int,
                       num_workers: int, drop_last: bool = False,
                       dealt: int | None = None) -> tuple[list[int], int]:
    """Samples each worker had delivered when the loop had consumed `batches_consumed`
    batches, and the worker the DataLoader would have asked next.

    Worker w holds its share of the rank's samples (`worker_bounds`, as in ShardPlan: even,
    or in whole batches of `dealt` when the dataset deals batches) and makes
    ceil(share / batch_size) batches (floor with drop_last); the DataLoader takes them round
    robin from worker 0, skipping workers that have none left.
    """
    workers = max(num_workers, 1)
    shares = [hi - lo for lo, hi in
              (worker_bounds(num_per_rank, w, workers, dealt) for w in range(workers))]
    limits = [share // batch_size if drop_last else -(-share // batch_size) for share in shares]
    if not 0 <= batches_consumed <= sum(limits):
        raise ValueError(f"{batches_consumed} batches consumed, but an epoch of {num_per_rank} "
                         f"samples in batches of {batch_size} over {workers} worker(s) has "
                         f"{sum(limits)}: the state comes from another configuration")
    taken = [0] * workers
    left, last = batches_consumed, -1
    while left:
        for w in range(workers):
            if left and taken[w] < limits[w]:
                taken[w] += 1
                left -= 1
                last = w
    counts = [min(t * batch_size, share) for t, share in zip(taken, shares, strict=True)]
    return counts, (last + 1) % workers


class PendingResume:
    """A resume point waiting for the next pass over its epoch: one count per worker.

    The counts live in a shared int64 tensor, like the dataset's epoch: a DataLoader worker
    that takes its count marks it used (-1) for the parent too, so the fresh workers of a
    later pass (persistent_workers=False) do not skip again.

    A new DataLoader asks worker 0 first, but the interrupted one would have asked worker
    `first` next: during the resumed pass, DataLoader worker w plays the part of worker
    (w + first) % num_workers (its share, its generator, its count), which puts the rest
    of the round robin back in the order it would have had.
    """

    def __init__(self, epoch: int, counts: Sequence[int], first: int = 0) -> None:
        self.epoch = check_epoch(epoch)
        self.counts = torch.tensor(list(counts), dtype=torch.int64)
        self.counts.share_memory_()  # type: ignore[no-untyped-call]
        self.first = first

    def worker_for(self, epoch: int, worker: int, num_workers: int) -> int:
        """The worker whose part DataLoader worker `worker` plays in this pass."""
        num_workers = max(num_workers, 1)
        if not bool((self.counts >= 0).any()):
            return worker
        if len(self.counts) != num_workers:
            raise ValueError(f"the resume state is for {len(self.counts)} DataLoader worker(s), "
                             f"this one has {num_workers}: resume with the same num_workers")
        return (worker + self.first) % num_workers if epoch == self.epoch else worker

    def take(self, epoch: int, worker: int, total: int) -> int:
        """How many of worker `worker`'s `total` samples to skip; the count is used up."""
        seen = int(self.counts[worker]) if worker < len(self.counts) else -1
        if seen < 0:
            return 0
        self.counts[worker] = -1
        if seen > total:
            raise ValueError(f"the resume state has {seen} samples seen, but this pass has only "
                             f"{total}: it comes from another dataset or configuration")
        if epoch == self.epoch:
            return seen
        if 0 < seen < total:
            raise ValueError(f"the resume state stops mid-way through epoch {self.epoch}, but "
                             f"this pass is epoch {epoch}: call set_epoch({self.epoch}) first")
        return 0  # a finished (or unstarted) epoch leaves nothing to resume in another one


def pending_from_state(state: Mapping[str, Any], seed: int, num_per_rank: int,
                       here: tuple[int, int] | None, per_worker: bool = True,
                       dealt: int | None = None) -> PendingResume:
    """Check a state (`state_dict()` or `loop_state(...)`) against this reader and parse it.

    `here` is (worker, num_workers) of a DataLoader worker loading it, None in the main
    process. A ChunkSampler's indices are one stream whatever the number of workers
    (`per_worker=False`): batches reach the loop in sampler order. `dealt`: the batch size
    a PackedIterableDataset deals its workers, if any.
    """
    if "epoch" not in state:
        raise ValueError(f"a resume state needs an epoch; got keys {sorted(state)}")
    epoch = check_epoch(int(state["epoch"]))
    if "seed" in state and int(state["seed"]) != seed:
        raise ValueError(f"the state was saved with seed {state['seed']}, this reader has seed "
                         f"{seed}: the order would differ; build it with seed={state['seed']}")
    if "batches_consumed" in state:
        counts, first = samples_per_worker(
            num_per_rank, int(state["batches_consumed"]), int(state["batch_size"]),
            int(state.get("num_workers", 0)) if per_worker else 0,
            bool(state.get("drop_last", False)), dealt)
        return PendingResume(epoch, counts, first)
    if "samples_seen" not in state:
        raise ValueError("a resume state needs samples_seen (from state_dict()) or "
                         "batches_consumed (from loop_state())")
    seen, worker = int(state["samples_seen"]), int(state.get("worker", 0))
    num_workers = max(int(state.get("num_workers", 1)), 1)
    if seen < 0 or not 0 <= worker < num_workers:
        raise ValueError(f"not a resume state: samples_seen {seen}, worker {worker} "
                         f"of {num_workers}")
    if num_workers > 1 and (here is None or here[0] != worker):
        raise ValueError(f"this is the state of DataLoader worker {worker} of {num_workers}; "
                         "resume a loader with workers from all of them: StatefulDataLoader, "
                         "or loop_state(epoch, batches_consumed, batch_size, num_workers)")
    counts = [-1] * num_workers
    counts[worker] = seen
    return PendingResume(epoch, counts)
