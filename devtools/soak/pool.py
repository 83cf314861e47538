"""Random DataLoader sessions over readers.collate's recycled buffers, every batch checked.

What scripts/soak_pool.py runs. One round picks a loader at random (format and decode,
map-style or iterable, 1-3 workers, persistent or not, prefetch 1-4, batch size, fork or
spawn), reads a random number of epochs, sometimes breaking off early, and meanwhile:
holds a random share of the batches (some only as a view of one image), hands some held
batches to another process (a multiprocessing queue to a spawned reader; a forked child
that reads one after the parent dropped it), and drops the rest. Every batch is checked
against the images read in the main process without workers when it arrives, and every
held batch again at the end of the round: a buffer reused too early shows up as changed
pixels there.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue as queue_module
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from readers import PackedDataset, PackedIterableDataset, collate

Reference = dict[tuple[str, str], dict[str, torch.Tensor]]


@dataclass
class Tally:
    """What the rounds did, and every mismatch found (empty when all is well)."""

    rounds: int = 0
    batches: int = 0
    held: int = 0
    handed_off: int = 0
    forked: int = 0
    mismatches: list[str] = field(default_factory=list)


def reference(paths: dict[str, Path]) -> Reference:
    """Every image by (format, decode) and key, read in this process (no pool involved)."""
    out: Reference = {}
    for fmt, path in paths.items():
        for decode in ("rgb8", "raw") if fmt == "npy" else ("rgb8",):
            size = None if fmt == "npy" else (24, 20)
            ds = PackedDataset(path, decode=decode, size=size, with_keys=True)
            images: dict[str, torch.Tensor] = {}
            for batch, _, keys in DataLoader(ds, batch_size=16, collate_fn=collate):
                images.update((key, image.clone()) for key, image in zip(keys, batch,
                                                                        strict=True))
            out[(fmt, decode)] = images
    return out


def _dataset(path: Path, fmt: str, decode: str, iterable: bool, seed: int) -> Any:
    size = None if fmt == "npy" else (24, 20)
    if iterable:
        return PackedIterableDataset(path, decode=decode, size=size,  # type: ignore[arg-type]
                                     with_keys=True, seed=seed)
    return PackedDataset(path, decode=decode, size=size, with_keys=True)  # type: ignore[arg-type]


def _mismatch(batch: Any, want: dict[str, torch.Tensor]) -> str | None:
    images, _, keys = batch
    for image, key in zip(images, keys, strict=True):
        if not torch.equal(image, want[key]):
            return str(key)
    return None


def _read_in_child(queue: Any, result: Any) -> None:
    """Spawned reader: compare what arrives with what the parent says it should be."""
    while (item := queue.get()) is not None:
        images, want = item
        result.put(bool(torch.equal(images, want)))


def _fork_reader(images: torch.Tensor, want: torch.Tensor) -> tuple[int, int]:
    """Fork a child that compares `images` with `want` once told to: by then the parent
    has dropped the batch and read more. Returns (pid, the pipe end that tells it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write)
        os.read(read, 1)
        os._exit(0 if torch.equal(images, want) else 1)
    os.close(read)
    return pid, write


def _forks_read_right(pending: list[tuple[int, int]]) -> int:
    """Tell every pending child to read; the number that saw changed pixels."""
    wrong = 0
    for pid, write in pending:
        os.write(write, b"x")
        os.close(write)
        _, status = os.waitpid(pid, 0)
        wrong += os.waitstatus_to_exitcode(status) != 0
    pending.clear()
    return wrong


def one_round(paths: dict[str, Path], want: Reference, rng: random.Random,
              tally: Tally, helper: tuple[Any, Any], collate_fn: Any = collate) -> None:
    fmt = rng.choice(sorted(paths))
    decode = rng.choice(("rgb8", "raw")) if fmt == "npy" else "rgb8"
    iterable = decode == "rgb8" and rng.random() < 0.3
    workers = rng.randint(1, 3)
    persistent = rng.random() < 0.5
    loader = DataLoader(_dataset(paths[fmt], fmt, decode, iterable, rng.randrange(1 << 30)),
                        batch_size=rng.choice((3, 4, 8, 16)), num_workers=workers,
                        collate_fn=collate_fn, persistent_workers=persistent,
                        prefetch_factor=rng.randint(1, 4), shuffle=None if iterable else True,
                        multiprocessing_context=rng.choice(("fork", "fork", "spawn")))
    reference_images = want[(fmt, decode)]
    held: list[tuple[Any, str]] = []
    forks: list[tuple[int, int]] = []
    for _ in range(rng.randint(1, 3)):
        for number, batch in enumerate(loader):
            tally.batches += 1
            bad = _mismatch(batch, reference_images)
            if bad is not None:
                tally.mismatches.append(f"on arrival: {fmt} {decode} key {bad}")
            _use(batch, reference_images, rng, tally, held, (*helper, forks))
            del batch
            if rng.random() < 0.05 and number > 0:
                break
        gc.collect()
    if wrong := _forks_read_right(forks):
        tally.mismatches.append(f"{wrong} forked children read changed pixels ({fmt} {decode})")
    for batch, kind in held:
        images, keys = batch
        for image, key in zip(images, keys, strict=True):
            if not torch.equal(image, reference_images[key]):
                tally.mismatches.append(f"held {kind}: {fmt} {decode} key {key} changed")
    tally.rounds += 1
    del loader


def _use(batch: Any, want: dict[str, torch.Tensor], rng: random.Random, tally: Tally,
         held: list[tuple[Any, str]], helper: tuple[Any, Any, list[tuple[int, int]]]) -> None:
    """Hold, hand off or drop one batch, as a training loop might."""
    images, _, keys = batch
    roll = rng.random()
    if roll < 0.25:
        held.append(((images, keys), "batch"))
        tally.held += 1
    elif roll < 0.35:
        held.append(((images[:1], keys[:1]), "view"))
        tally.held += 1
    elif roll < 0.40:
        queue, result, _ = helper
        queue.put((images, torch.stack([want[key] for key in keys])))
        tally.handed_off += 1
        try:
            same = result.get(timeout=60)
        except queue_module.Empty:
            same = False
        if not same:
            tally.mismatches.append(f"handed off: key {keys[0]} read wrong in the child")
    elif roll < 0.43:
        helper[2].append(_fork_reader(images, torch.stack([want[key] for key in keys])))
        tally.forked += 1


def run(paths: dict[str, Path], rounds: int, seed: int,
        progress: Any = None, collate_fn: Any = collate) -> Tally:
    """`rounds` random rounds; the returned tally lists every mismatch. `collate_fn`:
    readers.collate, or torch's default_collate for a run to compare with."""
    rng = random.Random(seed)
    want = reference(paths)
    tally = Tally()
    context = multiprocessing.get_context("spawn")
    queue, result = context.Queue(), context.Queue()
    reader = context.Process(target=_read_in_child, args=(queue, result), daemon=True)
    reader.start()
    try:
        for number in range(1, rounds + 1):
            one_round(paths, want, rng, tally, (queue, result), collate_fn)
            if progress is not None:
                progress(number, tally)
    finally:
        queue.put(None)
        reader.join(timeout=10)
    return tally
