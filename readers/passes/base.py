"""PartitionPasses: the passes of a reader that streams a split plan (PackedIterableDataset, Mix).

What both iterable readers share once they have a plan: the world of a pass (world), its
epoch (epochs), this worker's spans, the count that state_dict()/load_state_dict() resume
from (resume), who splits (partition_owner) and a loader's skip of a pass's first batches
(skip), each a module beside this one.

The protocol of a split reader: it lists PartitionPasses before its other bases, calls
`_init_passes(partition, shuffle=..., seed=..., batch_size=...)` in its `__init__` (once what
its plan needs is set, `_check_plan()` makes a first plan so bad arguments fail there),
and provides `_plan_for(world_size)` (a ChunkPlan or subclass) and
`_stream(spans, plan, where, skip)` (the samples). Pickling is PartitionPasses' own
`__getstate__`: the next base's state plus what a spawned worker cannot find out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from torch.utils.data import get_worker_info

from readers.options import PartitionOptions
from readers.passes.epochs import PassEpochs
from readers.passes.loop import loop_state
from readers.passes.partition_owner import LoaderView, OwnedSplit
from readers.passes.resume import (
    PendingResume,
    from_worker_states,
    pending_from_state,
    posts_on_board,
)
from readers.passes.skip import LoaderSkip
from readers.passes.stream import rest_after
from readers.passes.world import LateWorld, RankWorld
from readers.plan.chunks import ChunkPlan, Spans, check_epoch, num_in
from readers.plan.elastic import piece


class LatestPass(NamedTuple):
    """A process's latest pass, as its `state_dict()` reports it: the worker it played,
    the topology it split for and whether it read a rest re-split."""

    epoch: int
    worker: int
    num_workers: int
    world_size: int
    dealt: int | None
    resplit: bool = False


class PartitionPasses(OwnedSplit):
    """Passes over a split plan; see the module docstring."""

    _sent: RankWorld | None  # the world when sent to a spawned worker
    _sent_view: LoaderView | None  # the loader's view when sent
    _split: tuple[bool, bool, int]  # (shuffle, drop_last, seed)
    _epochs: PassEpochs
    _resume: PendingResume | None
    _pass: LatestPass | None  # this process's latest pass ...
    _seen: int  # ... and the samples it yielded
    _pending_skip: LoaderSkip | None  # batches the coming pass starts after (skip)
    _posted: Mapping[str, Any] | None  # a worker's own state, posted on the board
    batch_size: int | None
    buffer_size: int

    def _init_passes(self, partition: PartitionOptions, *, shuffle: bool, seed: int,
                     batch_size: int | None) -> None:
        """Set the state every pass reads: the world `partition` names (resolved late), the
        plan's (shuffle, drop_last, seed), the shared epoch word, no resume and no pass
        yet. `batch_size` deals each worker whole batches (None: the loader's)."""
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be at least 1 (or None), not {batch_size}")
        self.batch_size, self.buffer_size = batch_size, partition.buffer_size
        self._world = LateWorld.of(partition.rank, partition.world_size)
        self._sent, self._sent_view = None, None
        self._split = (shuffle, partition.drop_last, seed)
        self._split_by, self._pending_skip = partition.by, None
        self._epochs = PassEpochs()
        self._resume, self._pass, self._seen, self._posted = None, None, 0, None

    def _stream(self, spans: Spans, plan: ChunkPlan, where: tuple[int, int, int],
                skip: int) -> Iterator[Any]:
        raise NotImplementedError

    def _sent_here(self) -> RankWorld | None:
        """The world the main process sent, in a DataLoader worker."""
        return self._sent if get_worker_info() is not None else None

    @property
    def epoch(self) -> int:
        """The epoch of the coming pass."""
        return self._epochs.next

    def set_epoch(self, epoch: int) -> None:
        """Name the coming epoch; reaches running (persistent) workers too. Without it,
        each pass takes the epoch after the previous pass's (`PassEpochs`)."""
        self._epochs.set_next(epoch)
        self._take_loader_skip()

    def _skip_next_pass(self, skip: LoaderSkip, at_set_epoch: bool) -> None:
        """Start the coming pass after `skip`'s batches (`skip_first_batches`): once its
        loader names the epoch (`at_set_epoch`), else now."""
        self._pending_skip = skip
        if not at_set_epoch:
            self._take_loader_skip()

    def _take_loader_skip(self) -> None:
        """Turn a pending skip into the coming pass's resume, skipped unread as a
        loop_state skips. In the main process only: a worker's loader is its parent's."""
        skip = self._pending_skip
        if skip is None or get_worker_info() is not None:
            return
        self._pending_skip = None
        view = self._view()
        world = 1 if view.framework_splits else self.world_size
        state = loop_state(self._epochs.next, skip.batches, skip.batch_size, skip.num_workers,
                           skip.drop_last, world_size=world)
        self._resume = pending_from_state(state, self._split[2], self._per_rank, None,
                                          dealt=self._dealt(view), world_now=world)

    def _view(self) -> LoaderView:
        """What the loader asking now wants (`loader_view`); in a spawned worker the
        view its parent found fills the gaps."""
        return super()._view().or_else(self._sent_view if get_worker_info() else None)

    def __iter__(self) -> Iterator[Any]:
        """This process's share of the epoch, less what a loaded state says it has seen.

        Not a generator itself: the count restarts when the pass is created, so a
        state_dict() taken before its first sample (StatefulDataLoader does) is right.
        """
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        posted, self._posted = self._posted, None
        if posted is not None:  # the other workers' counts are read at the first sample
            self._pass = LatestPass(int(posted["epoch"]), worker, num_workers, self.world_size,
                                    self._dealt(self._view()), resplit=True)
            self._seen = 0
            return self._after_board(posted, worker, num_workers)
        return self._start(worker, num_workers)

    def _after_board(self, posted: Mapping[str, Any], worker: int,
                     num_workers: int) -> Iterator[Any]:
        """The pass, once the loader's workers have all posted their counts
        (`WorkerBoard`): the rest of the epoch they name, re-split."""
        states = [{**posted, "worker": w, "samples_seen": seen}
                  for w, seen in enumerate(self._epochs.board.gather(num_workers))]
        self._resume = from_worker_states(states, self._split[2])
        yield from self._start(worker, num_workers)

    def _start(self, worker: int, num_workers: int) -> Iterator[Any]:
        """The pass of (DataLoader) worker `worker` of `num_workers`; see `__iter__`."""
        self._take_loader_skip()
        view = self._view()
        rank, world_size = self._world_for_pass(view)
        plan = self._plan_for(world_size)
        epoch, resume, skip, dealt = self._epochs.start_pass(), self._resume, 0, self._dealt(view)
        elastic = resume.elastic_for(epoch, world_size, num_workers, dealt,
                                     self._epochs.token) if resume else None
        if elastic is not None:  # saved on another topology: the rest, re-split
            rest = rest_after(self._plan_for(elastic[0].world_size), elastic, epoch,
                              self.buffer_size, per_worker=True)
            spans = piece(rest, world_size, plan.drop_last, rank, worker, num_workers, dealt)
        else:
            if resume is not None:
                worker = resume.worker_for(epoch, worker, num_workers)
            spans = plan.worker_spans(epoch, rank, worker, num_workers, dealt)
            if resume is not None:
                skip = resume.take(epoch, worker, num_in(spans))
        self._pass = LatestPass(epoch, worker, num_workers, world_size, dealt, elastic is not None)
        self._seen = skip
        return self._stream(spans, plan, (epoch, rank, worker), skip)

    def _dealt(self, view: LoaderView) -> int | None:
        """The run of samples dealt whole to each worker: the framework's, when it splits
        (it takes that many at a time across its ranks), else this reader's batch size,
        else its loader's, so no worker ends on a partial batch of its own."""
        if view.framework_splits and view.batch_size is not None:
            return view.batch_size
        return self.batch_size if self.batch_size is not None else view.batch_size

    def __getstate__(self) -> dict[str, Any]:
        """The next base's state (a PackedIterableDataset's drops its handles), pickled for a
        spawned worker with what the worker cannot find out: the world (it cannot ask the
        process group) and the loader's view, both as of now."""
        state = _base_state(super(), self)
        state["_sent"] = self._world.now(self._sent_here())
        state["_sent_view"] = self._view()
        return state

    def state_dict(self) -> dict[str, int]:
        """{"epoch", "seed", "samples_seen", "worker", "num_workers", "world_size", "dealt"}
        of this process's pass ("dealt" 0: an even split among the workers).

        In a DataLoader worker, that worker's share (StatefulDataLoader collects it from each
        worker with every batch); the main process of a loader with workers knows nothing
        of theirs: save `loop_state` there.
        """
        info = get_worker_info()
        latest = self._pass or LatestPass(
            self.epoch, *((info.id, info.num_workers) if info is not None else (0, 1)),
            self.world_size, self.batch_size)
        state = {"epoch": latest.epoch, "seed": self._split[2], "samples_seen": self._seen,
                 "worker": latest.worker, "num_workers": latest.num_workers,
                 "world_size": latest.world_size, "dealt": latest.dealt or 0}
        if latest.resplit:
            state["resumed_from"] = 1  # its counts are of a re-split rest: refused on load
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next pass over state["epoch"] skip what was seen, worker by worker.

        Takes one worker's `state_dict()` inside that worker (StatefulDataLoader does
        this; from a pass on another world size the loader's workers pool their counts on
        the dataset's `WorkerBoard`), or in the main process before
        the DataLoader starts its workers either `loop_state(...)` or a whole
        StatefulDataLoader `state_dict()`, which then loads on any world size and worker
        count (the rest of its epoch, re-split). The next pass
        is then the state's epoch; a `set_epoch` to another epoch raises if the state stops
        mid-epoch.
        """
        info = get_worker_info()
        here = (info.id, info.num_workers) if info is not None else None
        if here is not None and posts_on_board(state, self.world_size):
            self._epochs.board.post(int(state.get("worker", here[0])), here[1],
                                    int(state["samples_seen"]))
            self._posted, self._resume = dict(state), None
            self._epochs.set_next(check_epoch(int(state["epoch"])))
            return
        self._posted = None
        self._resume = pending_from_state(state, self._split[2], self._per_rank, here,
                                          dealt=self.batch_size, world_now=self.world_size)
        self._epochs.set_next(self._resume.epoch)


def _base_state(parent: Any, reader: object) -> dict[str, Any]:
    """A copy of the state the class after PartitionPasses pickles; a copy of `__dict__` where
    that is object's (which has `__getstate__` from Python 3.11 on, and there gives the
    `__dict__` itself, or None when it is empty)."""
    getstate = getattr(parent, "__getstate__", None)
    state = getstate() if getstate is not None else None
    return dict(state) if state is not None else dict(vars(reader))
