"""Who splits the data across ranks: the readers, or the framework around their loader.

There is one owner of the split in every setup. Plain torch DDP and Lightning leave the
split to the readers (Lightning keeps a ChunkSampler, a DistributedSampler, as it is, and
never shards an IterableDataset). Accelerate's `prepare`, and so transformers' `Trainer`,
which prepares its loaders with it, split every loader themselves:

    DataLoaderDispatcher   (iterable datasets, dispatch_batches default) rank 0 alone
                           iterates the loader and sends every rank its slice of each batch
    IterableDatasetShard   (dispatch_batches=False) every rank iterates the whole stream and
                           keeps its slice of every batch_size * num_processes samples
    BatchSamplerShard      (map-style) every rank draws the whole batch sampler and keeps
                           every num_processes-th batch

A reader asked by one of them hands it the unsplit view, the whole epoch in the same order
on every rank (the order is a function of seed and epoch only), and the framework keeps
each rank's part; anywhere else the readers split by rank themselves.

Who asks is read off the call stack, because each framework object asks from inside its
own `__len__` or `__iter__`: a pass's start and `len()` walk up the calling frames for a
splitter that holds this reader. A forked DataLoader worker inherits the main process's
frames up to the fork (the loader's `__iter__` among them); a spawned worker gets the view
its parent found when it pickled the reader (`LoaderView` travels with it). The same walk
finds the plain DataLoader that iterates a reader, whose batch size a reader that deals
whole batches to its workers uses when it was given none.

The same walk finds a framework loader that would drop the first batches of a pass:
accelerate's `skip_first_batches`, which transformers' Trainer resumes a checkpoint with,
makes a DataLoaderShard or DataLoaderDispatcher with `skip_batches` (SkipDataLoader for a
loader it did not prepare) that reads and decodes those batches and throws them away.
Both ask the reader for its `set_epoch` from their own `__iter__`, in the main process
before any worker starts, so `loader_skip` finds them there and takes the skip over: the
loader drops nothing, and the reader starts its pass at the position (readers.passes.base).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

from torch.utils.data import DataLoader

SPLITTER_PACKAGES = ("accelerate", "transformers")


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
        if other is None:
            return self
        if self.framework_splits:
            return self
        if other.framework_splits:
            return other
        return LoaderView(None, self.batch_size or other.batch_size)


NO_VIEW = LoaderView()


def loader_view(target: object) -> LoaderView:
    """The view the loader that is now measuring or iterating `target` asks for.

    The first framework splitter up the stack that holds `target` decides; else the
    innermost DataLoader over `target` gives its batch size; else nothing is asked.
    """
    batch_size = None
    for owner in _callers(sys._getframe(1)):
        found = splitter_view(owner, target)
        if found is not None:
            return found
        if batch_size is None and isinstance(owner, DataLoader) and owner.dataset is target:
            batch_size = owner.batch_size
    return LoaderView(None, batch_size)


@dataclass(frozen=True)
class LoaderSkip:
    """The batches a framework loader would drop at the start of a pass, as a loop counts
    them (readers.passes.resume.loop_state): `batches` of the torch DataLoader under it, each
    `batch_size` samples of the reader's stream, over `num_workers` workers."""

    batches: int
    batch_size: int
    num_workers: int
    drop_last: bool


SKIPPERS = ("DataLoaderShard", "DataLoaderDispatcher", "SkipDataLoader")


def loader_skip(target: object) -> LoaderSkip | None:
    """Take over the skip of the accelerate loader up the stack that would drop the first
    batches of `target`'s coming pass: its `skip_batches` becomes 0, and what it would
    have dropped is returned for the reader to skip unread. None: no such loader."""
    for owner in _callers(sys._getframe(1)):
        kind = type(owner)
        if kind.__module__.split(".")[0] != "accelerate" or kind.__name__ not in SKIPPERS:
            continue
        skip = _skip_of(owner, target)
        if skip is not None:
            owner.skip_batches = 0  # type: ignore[attr-defined]
            return skip
    return None


def _skip_of(owner: object, target: object) -> LoaderSkip | None:
    """What `owner` would drop of `target`'s stream, in batches of the DataLoader under it."""
    skipped = int(getattr(owner, "skip_batches", 0) or 0)
    dataset = getattr(owner, "dataset", None)
    shard = dataset if type(dataset).__name__ == "IterableDatasetShard" else None
    if skipped < 1 or (dataset is not target and getattr(shard, "dataset", None) is not target):
        return None
    batch_size = int(getattr(owner, "batch_size", None) or 1)
    if type(owner).__name__ == "DataLoaderDispatcher" and not getattr(owner, "split_batches",
                                                                      False):
        # each dispatched batch is num_processes batches of the loader on rank 0
        skipped *= int(getattr(getattr(owner, "state", None), "num_processes", 1))
    if shard is not None and not getattr(shard, "split_batches", False):
        batch_size *= int(getattr(shard, "num_processes", 1))  # a batch keeps a slice of those
    return LoaderSkip(skipped, batch_size, int(getattr(owner, "num_workers", 0) or 0),
                      bool(getattr(owner, "drop_last", False)))


def _callers(frame: FrameType | None) -> Iterator[object]:
    """The `self` of every method up the stack from `frame`."""
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
    if kind.__module__.split(".")[0] not in SPLITTER_PACKAGES:
        return None
    name = f"{kind.__module__.split('.')[0]}'s {kind.__name__}"
    if kind.__name__ == "IterableDatasetShard" and getattr(owner, "dataset", None) is target:
        return _shard_view(owner, name)
    if kind.__name__ == "DataLoaderDispatcher" and getattr(owner, "dataset", None) is target:
        processes = int(getattr(getattr(owner, "state", None), "num_processes", 1))
        return LoaderView(name, getattr(owner, "batch_size", None)) if processes > 1 else None
    if kind.__name__ == "BatchSamplerShard" and _samples_from(owner, target):
        return LoaderView(name) if int(getattr(owner, "num_processes", 1)) > 1 else None
    return None


def _shard_view(shard: object, name: str) -> LoaderView | None:
    processes = int(getattr(shard, "num_processes", 1))
    if processes < 2:
        return None
    batch_size = getattr(shard, "batch_size", None)
    if batch_size is not None and not getattr(shard, "split_batches", False):
        batch_size *= processes  # the shard keeps its slice of every such run
    return LoaderView(name, batch_size)


def _samples_from(shard: object, target: object) -> bool:
    inner = getattr(shard, "batch_sampler", None)
    return inner is target or getattr(inner, "sampler", None) is target
