"""skip_first_batches: resume a loader past its first batches without reading them.

The call Accelerate documents for a resume (`accelerator.skip_first_batches(loader, n)`)
reads and decodes the skipped batches and throws them away, because a loader cannot know
where its dataset would be after them. An iterable reader can: given the batches, their
size and the loader's workers, it starts its coming pass at that position as a
`loop_state` would, and the loader reads nothing twice.
transformers' Trainer asks for this skip through `Trainer.get_resumed_dataloader`, the
method its docs name for streaming loaders; the frameworks guide shows the override.

Accelerate's loaders are read through their documented constructor arguments only
(`batch_size`, `num_workers`, `drop_last`, `split_batches`, `num_processes`); any other
loader (a map-style one: its sampler skips index batches unread already) goes to
Accelerate's own `skip_first_batches`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from readers.passes.partition_owner import _Changed, across_ranks, documented, named

LoaderT = TypeVar("LoaderT")


@dataclass(frozen=True)
class LoaderSkip:
    """The batches a loader is to start its coming pass after, as a loop counts them
    (`loop_state`): `batches` of the torch DataLoader under it, each
    `batch_size` samples of the reader's stream, over `num_workers` workers."""

    batches: int
    batch_size: int
    num_workers: int
    drop_last: bool


class Skips(Protocol):
    def _skip_next_pass(self, skip: LoaderSkip, at_set_epoch: bool) -> None: ...


def skip_first_batches(loader: LoaderT, num_batches: int) -> LoaderT:
    """`loader`, to start its next pass after its first `num_batches` batches.

    Over an iterable reader (PackedIterableDataset, Mix), directly or under Accelerate's
    `prepare`, the reader starts there and the same loader is returned; any other loader
    is Accelerate's `skip_first_batches(loader, num_batches)`.
    """
    if num_batches < 0:
        raise ValueError(f"num_batches must be 0 or more, not {num_batches}")
    reader = _iterable_reader(loader)
    if reader is None:
        return _accelerate_skip(loader, num_batches)
    if num_batches:
        # an Accelerate loader names the coming epoch (set_epoch) as it starts: the skip
        # waits for it; under a plain DataLoader the reader's next pass is the one
        reader._skip_next_pass(_skip_of(loader, num_batches),
                               at_set_epoch=hasattr(loader, "set_epoch"))
    return loader


def _iterable_reader(loader: object) -> Skips | None:
    dataset = getattr(loader, "dataset", None)
    if type(dataset).__name__ == "IterableDatasetShard":  # dispatch_batches=False
        dataset = getattr(dataset, "dataset", None)
    return dataset if hasattr(dataset, "_skip_next_pass") else None


def _skip_of(loader: object, num_batches: int) -> LoaderSkip:
    """What `num_batches` of `loader` are, in batches of the DataLoader under it."""
    name = named(loader)
    try:
        batch_size = documented(loader, "batch_size", name) or 1
        if type(loader).__name__ == "DataLoaderDispatcher" and not documented(
                loader, "split_batches", name):
            # each dispatched batch is num_processes batches of the loader on rank 0
            num_batches *= documented(getattr(loader, "state", None), "num_processes", name)
        shard = getattr(loader, "dataset", None)
        if type(shard).__name__ == "IterableDatasetShard":
            # each rank keeps its slice of every run the shard takes across the ranks
            batch_size = across_ranks(shard, batch_size, named(shard))
        return LoaderSkip(num_batches, batch_size, documented(loader, "num_workers", name),
                          bool(documented(loader, "drop_last", name)))
    except _Changed as changed:
        raise RuntimeError(
            f"{changed}, which readers.skip_first_batches reads to place the skip (a newer "
            f"release?): skip with accelerate's skip_first_batches, which reads the skipped "
            f"batches") from None


def _accelerate_skip(loader: LoaderT, num_batches: int) -> LoaderT:
    try:
        from accelerate import (  # type: ignore[import-untyped]
            skip_first_batches as accelerate_skip,
        )
    except ImportError:
        raise TypeError(
            f"skip_first_batches skips unread over PackedIterableDataset and Mix loaders; "
            f"{type(loader).__name__} over {type(getattr(loader, 'dataset', None)).__name__} "
            f"needs accelerate (pip install accelerate), or resume it with loop_state"
        ) from None
    skipped: LoaderT = accelerate_skip(loader, num_batches)
    return skipped
