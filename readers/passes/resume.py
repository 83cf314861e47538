"""Resume an epoch mid-way: exactly the samples not yet seen, in the order they would have come.

Every order here is a pure function of (seed, epoch, rank, worker, num_workers): the chunk
plan (`ChunkPlan`) and the shuffle buffer's generator, `epoch_rng(seed, epoch, rank, worker,
2)` for a PackedIterableDataset worker, `(seed, epoch, rank, 1)` for a ChunkSampler. The
buffer draws the same numbers whatever the items, so a pass's order is known before reading
a byte, and a position in an epoch is one count per process that iterates:

    ChunkSampler           {"epoch", "seed", "samples_seen"}                (main process)
    PackedIterableDataset  {"epoch", "seed", "samples_seen", "worker", "num_workers"}
                                                                 (each DataLoader worker)

Counts are equal on every rank (each rank yields the same number of batches), so a state
saved on one rank resumes any rank. Every state (a `loop_state` too) records the world
size of its pass ("world_size"), so it loads on another topology: the pass reads the rest
of the epoch re-split for the ranks and workers it has, each sample once, with equal
lengths per rank. A ChunkSampler's count is one stream's (a loop state with batches of
1, no workers); workers handed their own states by a StatefulDataLoader (as Lightning's
`fit(ckpt_path=)` restores) post their counts on the dataset's shared `WorkerBoard`, and
each reads all of them at its first sample. A job that resumed so and stops again saves
`loop_state(..., resumed_from=the state it loaded)`.

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
  exact count per worker (`samples_per_worker`). transformers' Trainer counts the same way;
  `skip_first_batches` turns its skip into such a count, so skipped batches are not read.

A state applies to one pass: the next pass over its epoch, or the passes of another
topology's re-split rest (its workers, by the pass's token); another pass over the same
epoch reads it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from readers.passes.loop import LoopState
from readers.plan.chunks import check_epoch
from readers.plan.elastic import Segment, samples_per_worker

PENDING, APPLIED, DONE = 1, 2, 0  # the stages of a resume that may re-split (PendingResume)


def segments_of(state: Mapping[str, Any], dealt: int | None, world_now: int,
                per_worker: bool = True) -> tuple[Segment, ...]:
    """The stretches of the epoch a loop state (and those it resumed from) ran, first first.

    `dealt`: the run the reader deals its workers whole, None for its loader's batch (the
    state's); a state without a world size ran on `world_now`; `per_worker=False`: one
    stream per rank (ChunkSampler).
    """
    earlier = state.get("resumed_from")
    before = segments_of(earlier, dealt, world_now, per_worker) if earlier is not None else ()
    batch_size = int(state["batch_size"])
    return (*before, Segment(
        int(state.get("world_size", world_now)),
        int(state.get("num_workers", 0)) if per_worker else 0, batch_size,
        int(state["batches_consumed"]), bool(state.get("drop_last", 0)),
        (dealt or batch_size) if per_worker else None))


class PendingResume:
    """A resume point waiting for the next pass over its epoch: one count per worker.

    The counts live in a shared int64 tensor: a DataLoader worker that takes its count
    marks it used (-1) for the parent too, so the fresh workers of a later pass
    (persistent_workers=False) do not skip again. A new DataLoader asks worker 0 first, the
    interrupted one would have asked worker `first`: in the resumed pass, worker w plays
    the part of worker (w + first) % num_workers, which restores the round robin's order.
    `segments` (a loop state's): what the job ran, for a re-split rest (`elastic_for`).
    """

    def __init__(self, epoch: int, counts: Sequence[int], first: int = 0,
                 segments: tuple[Segment, ...] = (), resplit: bool = False) -> None:
        self.epoch = check_epoch(epoch)
        self.counts = torch.tensor(list(counts), dtype=torch.int64)
        self.counts.share_memory_()  # type: ignore[no-untyped-call]
        self.first = first
        self.segments = segments
        self.resplit = resplit  # re-split even on the same topology (counts are not kept)
        # [stage, token]: PENDING, then APPLIED by the pass (token) that re-splits, DONE
        self._elastic = torch.tensor([PENDING if segments else DONE, 0], dtype=torch.int64)
        self._elastic.share_memory_()  # type: ignore[no-untyped-call]

    def elastic_for(self, epoch: int, world_size: int, num_workers: int | None,
                    dealt: int | None, pass_token: int | None = None) -> tuple[Segment, ...] | None:
        """The segments to re-split for a pass on this topology (`num_workers` None: a
        ChunkSampler's single stream), or None where the counts apply as they are.

        `pass_token` names the pass (the same in all its workers; None: each call a new
        pass): the re-split rest is the first asking pass's; a later pass reads it whole.
        """
        stage = int(self._elastic[0])
        if stage == DONE:
            return None
        if epoch != self.epoch:
            if stage == PENDING and self.segments[-1].batches_consumed > 0:
                raise ValueError(f"the resume state stops mid-way through epoch {self.epoch}, "
                                 f"but this pass is epoch {epoch}: call set_epoch({self.epoch}) "
                                 "first")
            self._elastic[0] = DONE
            return None
        if stage == APPLIED:
            if pass_token is None or int(self._elastic[1]) != pass_token:
                self._elastic[0] = DONE  # a new pass over the epoch: the whole epoch
                return None
            return self.segments
        if self._same_topology(world_size, num_workers, dealt):
            self._elastic[0] = DONE  # the counts apply as they are
            return None
        self._elastic[1] = pass_token or 0
        self._elastic[0] = APPLIED
        self.counts.fill_(-1)  # the re-split rest replaces them
        return self.segments

    def _same_topology(self, world_size: int, num_workers: int | None,
                       dealt: int | None) -> bool:
        last = self.segments[-1]
        if self.resplit or len(self.segments) > 1 or last.world_size != world_size:
            return False
        if num_workers is None:  # one stream per rank
            return True
        workers = max(num_workers, 1)
        return max(last.num_workers, 1) == workers and (workers == 1 or last.dealt == dealt)

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


def pending_from_state(state: Mapping[str, Any], seed: int,
                       per_rank_of: Callable[[int], int], here: tuple[int, int] | None,
                       per_worker: bool = True, dealt: int | None = None,
                       world_now: int = 1) -> PendingResume:
    """Check a state (`state_dict()` or `loop_state(...)`) against this reader and parse it.

    `per_rank_of(world_size)`: samples per rank of this reader's epoch on that many ranks;
    `world_now`: this reader's world size; `here`: (worker, num_workers) of a DataLoader
    worker loading it, None in the main process; `per_worker=False`: a ChunkSampler's one
    stream of indices; `dealt`: the batch size a PackedIterableDataset deals its workers.
    """
    if "epoch" not in state and not reader_states(state):
        raise ValueError(f"a resume state needs an epoch; got keys {sorted(state)}")
    epoch = check_epoch(int(state.get("epoch", 0)))
    _check_seed(state, seed)
    if not per_worker and "batches_consumed" not in state and "samples_seen" in state:
        saved = int(state.get("world_size", world_now))
        if saved != world_now:  # one stream per rank: its count, re-split
            state = stream_state(state, saved)
    if "batches_consumed" in state:
        return _from_loop_state(state, epoch, per_rank_of,
                                segments_of(state, dealt, world_now, per_worker))
    if "samples_seen" not in state and here is None and per_worker:
        workers = reader_states(state)
        if workers:
            return from_worker_states(workers, seed)
    if "samples_seen" not in state:
        raise ValueError("a resume state needs samples_seen (from state_dict()) or "
                         "batches_consumed (from loop_state())")
    if "resumed_from" in state:
        raise ValueError("this state was saved in a pass resumed on another topology; save "
                         "loop_state(epoch, batches_consumed, batch_size, num_workers, "
                         "resumed_from=STATE) from the loop instead")
    if int(state.get("world_size", world_now)) != world_now:
        raise ValueError(f"this worker's state was saved on {state['world_size']} rank(s), "
                         f"this reader runs on {world_now}: load the whole StatefulDataLoader "
                         "state into the reader (reader.load_state_dict(loader_state)) before "
                         "the loader starts, or save loop_state(...), to resume on another "
                         "world size")
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


def _from_loop_state(state: Mapping[str, Any], epoch: int, per_rank_of: Callable[[int], int],
                     segments: tuple[Segment, ...]) -> PendingResume:
    """A loop state's counts per worker, for the world it was saved under."""
    last = segments[-1]
    counts, first = samples_per_worker(per_rank_of(last.world_size), last.batches_consumed,
                                       last.batch_size, last.num_workers, last.drop_last,
                                       last.dealt)
    if len(segments) > 1:
        counts = [-1] * len(counts)  # the counts are of a re-split rest, not of the plan
    return PendingResume(epoch, counts, first, segments)


def reader_states(state: object) -> list[Mapping[str, Any]]:
    """Our workers' states nested anywhere in a loader's state (a StatefulDataLoader's)."""
    if not isinstance(state, Mapping):
        return []
    if "samples_seen" in state and "num_workers" in state:
        return [state]
    return [found for value in state.values() for found in reader_states(value)]


def stream_state(state: Mapping[str, Any], world_size: int) -> LoopState:
    """A ChunkSampler's `state_dict()` as the loop state it equals: `samples_seen` batches
    of 1 from one stream per rank (a loop state passes as it is)."""
    if "batches_consumed" in state:
        return dict(state)
    return {"epoch": check_epoch(int(state["epoch"])), "seed": int(state.get("seed", 0)),
            "batches_consumed": int(state["samples_seen"]), "batch_size": 1, "num_workers": 0,
            "drop_last": 0, "world_size": world_size}


def posts_on_board(state: Mapping[str, Any], world_now: int) -> bool:
    """Whether `state` is one DataLoader worker's own state from a pass on another world
    size: alone it does not say how far the others got, so it goes on the `WorkerBoard`."""
    return ("samples_seen" in state and "batches_consumed" not in state
            and "resumed_from" not in state
            and int(state.get("world_size", world_now)) != world_now)


def from_worker_states(states: Sequence[Mapping[str, Any]], seed: int) -> PendingResume:
    """The workers' states of one loader (one rank's: every rank's counts are equal), read
    as one stretch of the epoch, which re-splits on whatever topology loads it."""
    first = states[0]
    shared = ("epoch", "seed", "num_workers", "world_size", "dealt")
    for state in states:
        if "resumed_from" in state:
            raise ValueError("this loader state was saved in a pass resumed on another "
                             "topology; save loop_state(..., resumed_from=STATE) from the loop "
                             "to resume it again")
        if any(state.get(key) != first.get(key) for key in shared):
            raise ValueError(f"the loader state holds workers of different passes: "
                             f"{[{k: s.get(k) for k in shared} for s in states]}")
    _check_seed(first, seed)
    epoch, workers = check_epoch(int(first["epoch"])), int(first["num_workers"])
    counts = [0] * max(workers, 1)
    for state in states:
        counts[int(state["worker"])] = int(state["samples_seen"])
    world = int(first.get("world_size", 1))
    segment = Segment(world, workers, 1, sum(counts), False, int(first.get("dealt", 0)) or None,
                      tuple(counts))
    return PendingResume(epoch, [-1] * len(counts), 0, (segment,), resplit=True)


def _check_seed(state: Mapping[str, Any], seed: int) -> None:
    if "seed" in state and int(state["seed"]) != seed:
        raise ValueError(f"the state was saved with seed {state['seed']}, this reader has seed "
                         f"{seed}: the order would differ; build it with seed={state['seed']}")
