"""Who splits the data across ranks: the readers, or the framework around their loader.

There is one owner of the split in every setup. Plain torch DDP and Lightning leave the
split to the readers (Lightning keeps a ChunkSampler, a DistributedSampler, as it is, and
never shards an IterableDataset). Accelerate's `prepare`, and so transformers' `Trainer`,
which prepares its loaders with it, split every loader themselves, with the classes
Accelerate documents in its data loader reference:

    DataLoaderDispatcher   (iterable datasets, dispatch_batches default) rank 0 alone
                           iterates the loader and sends every rank its slice of each batch
    IterableDatasetShard   (dispatch_batches=False) every rank iterates the whole stream and
                           keeps its slice of every batch_size * num_processes samples
    BatchSamplerShard      (map-style) every rank draws the whole batch sampler and keeps
                           every num_processes-th batch

A reader asked by one of them hands it the unsplit view, the whole epoch in the same order
on every rank (the order is a function of seed and epoch only), and the framework keeps
each rank's part; anywhere else the readers split by rank themselves.

`PartitionOptions(by=...)` names the owner: "auto" finds it, "readers" or "framework" say it.
"auto" looks at who asks, because each framework object asks from inside its own
`__len__` or `__iter__`: a pass's start and `len()` look up the calling frames
(`inspect.currentframe`) for one of those classes that holds this reader, and read the
constructor arguments Accelerate documents for it (`num_processes`, `batch_size`,
`split_batches`). Nothing is written to the framework's objects. A forked DataLoader worker
inherits the main process's frames up to the fork (the loader's `__iter__` among them); a
spawned worker gets the view its parent found when it pickled the reader (`LoaderView`
travels with it). The same look finds the plain DataLoader that iterates a reader, whose
batch size a reader that deals whole batches to its workers uses when it was given none.

What can fail is said, not guessed: a splitter that lacks an argument it documents (a
release that renamed it) stops the pass with an error that names it and the `by=` value
that does without; an interpreter without frames finds no owner, and `by=` says it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

from torch.utils.data import DataLoader

from readers.options import PartitionBy
from readers.passes.world import LateWorld, RankWorld
from readers.plan.chunks import ChunkPlan

SPLITTER_PACKAGES = ("accelerate", "transformers")
SAID = "PartitionOptions(by='framework')"


@dataclass(frozen=True)
class LoaderView:
    """What the loader asking a reader wants of it.

    `splitter`: the framework object that splits across ranks ("accelerate's
    DataLoaderDispatcher"), None when the readers split; `batch_size`: the number of
    samples the loader takes at a time (a framework splitter: across all its ranks), the
    unit a reader deals its workers whole when it was given no batch size.
    """

    splitter: str | None = None
    batch_size: int | None = None

    @property
    def framework_splits(self) -> bool:
        return self.splitter is not None

    def or_else(self, other: LoaderView | None) -> LoaderView:
        """This view, its gaps filled from `other` (the view a parent process sent)."""
        if other is None or self.framework_splits:
            return self
        if other.framework_splits:
            return other
        return LoaderView(None, self.batch_size or other.batch_size)


class OwnedSplit:
    """What ChunkSampler and the iterable readers (PartitionPasses) share: a plan for the
    world resolved late (`LateWorld`), split by the readers or by the framework that asks
    (`_split_by`, PartitionOptions.by). Each provides `_plan_for(world_size)`."""

    _world: LateWorld
    _split_by: PartitionBy

    def _plan_for(self, world_size: int) -> ChunkPlan:
        raise NotImplementedError

    def _check_plan(self) -> None:
        """Make the plan for the world as of now, so bad arguments fail in `__init__`
        rather than in a DataLoader worker."""
        self._plan_for(self.world_size)

    def _per_rank(self, world_size: int) -> int:
        """Samples per rank of an epoch split for `world_size` ranks."""
        return self._plan_for(world_size).num_per_rank

    def _sent_here(self) -> RankWorld | None:
        """The world a parent process sent this copy (none here; see PartitionPasses)."""
        return None

    def _view(self) -> LoaderView:
        """What the loader asking now wants (`loader_view`)."""
        return loader_view(self, self._split_by)

    @property
    def plan(self) -> ChunkPlan:
        """The split for the world as of now."""
        return self._plan_for(self.world_size)

    @property
    def rank(self) -> int:
        return self._world.now(self._sent_here())[0]

    @property
    def world_size(self) -> int:
        return self._world.now(self._sent_here())[1]

    def __len__(self) -> int:
        """Samples this rank yields per epoch; the whole epoch's when a framework that splits
        across ranks itself asks."""
        return self._per_rank(1 if self._view().framework_splits else self.world_size)

    def _world_for_pass(self, view: LoaderView) -> RankWorld:
        """The rank and world size a pass starting now splits for (`LateWorld.for_pass`);
        0 of 1 when the framework splits: it keeps each rank's part of the whole."""
        world = self._world.for_pass(self._sent_here())
        return (0, 1) if view.framework_splits else world


def loader_view(target: object, by: PartitionBy = "auto") -> LoaderView:
    """The view the loader that is now measuring or iterating `target` asks for.

    "auto": the first framework splitter up the stack that holds `target` decides; else
    the innermost DataLoader over `target` gives its batch size. "readers" never hands the
    split over; "framework" always does, with the splitter's batch size where one is found.
    """
    batch_size = None
    for owner in _callers(inspect.currentframe()):
        if by != "readers":
            found = _found_splitter(owner, target, strict=by == "auto")
            if found is not None:
                return found
        if batch_size is None and isinstance(owner, DataLoader) and owner.dataset is target:
            batch_size = owner.batch_size
    return LoaderView(SAID if by == "framework" else None, batch_size)


def _found_splitter(owner: object, target: object, strict: bool) -> LoaderView | None:
    """`owner`'s view if it splits `target`; a changed splitter is an error when `strict`
    (the owner was to be found), else passed over (the options said it)."""
    try:
        return splitter_view(owner, target)
    except _Changed as changed:
        if strict:
            raise RuntimeError(
                f"{changed}, which the readers read to know whether it splits the data "
                f"across ranks (a newer release?): pass PartitionOptions(by='framework') when "
                f"it splits them, by='readers' when not") from None
        return None


def _callers(frame: FrameType | None) -> Iterator[object]:
    """The `self` of every method up the stack from `frame` (None: no frames to look at)."""
    frame = frame.f_back if frame is not None else None  # not loader_view's own
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if owner is not None:
                yield owner
        frame = frame.f_back


def splitter_view(owner: object, target: object) -> LoaderView | None:
    """The view of `owner` if it is a framework object splitting `target` across ranks."""
    kind = type(owner)  # not owner.__class__: accelerate's loaders claim DataLoader's
    package = kind.__module__.split(".")[0]
    if package not in SPLITTER_PACKAGES:
        return None
    name = named(owner)
    if kind.__name__ == "IterableDatasetShard" and getattr(owner, "dataset", None) is target:
        return _shard_view(owner, name)
    if kind.__name__ == "DataLoaderDispatcher" and getattr(owner, "dataset", None) is target:
        processes = documented(getattr(owner, "state", None), "num_processes", name)
        return LoaderView(name, documented(owner, "batch_size", name)) if processes > 1 else None
    if kind.__name__ == "BatchSamplerShard" and _samples_from(owner, target, name):
        return LoaderView(name) if documented(owner, "num_processes", name) > 1 else None
    return None


def named(owner: object) -> str:
    """"accelerate's IterableDatasetShard": the package and class of `owner`, for messages."""
    return f"{type(owner).__module__.split('.')[0]}'s {type(owner).__name__}"


class _Changed(AttributeError):
    """A framework object lacks a constructor argument it documents (a newer release?);
    its message names both, and each caller says what to do about it."""


def documented(owner: object, argument: str, name: str) -> int:
    """The documented constructor argument `argument` of the framework object `owner`
    (`name`), as an int; _Changed when `owner` lacks it."""
    try:
        value = getattr(owner, argument)
    except AttributeError:
        raise _Changed(f"{name} has no `{argument}`") from None
    return int(value or 0)


def across_ranks(owner: object, batch_size: int, name: str) -> int:
    """The samples of `batch_size`-sample batches that `owner`, a framework object with
    `num_processes` and `split_batches`, takes at a time across its ranks: one batch split
    among them (split_batches), else one batch each."""
    if documented(owner, "split_batches", name):
        return batch_size
    return batch_size * documented(owner, "num_processes", name)


def _shard_view(shard: object, name: str) -> LoaderView | None:
    if documented(shard, "num_processes", name) < 2:
        return None
    batch_size = documented(shard, "batch_size", name)
    # the shard keeps its slice of every such run
    return LoaderView(name, across_ranks(shard, batch_size, name) if batch_size else None)


def _samples_from(shard: object, target: object, name: str) -> bool:
    if not hasattr(shard, "batch_sampler"):
        raise _Changed(f"{name} has no `batch_sampler`")
    inner = shard.batch_sampler
    return inner is target or getattr(inner, "sampler", None) is target
