"""The batch pool measured: the same readers through a 2-worker DataLoader with
`readers.collate`, its recycled shared memory on, and off (batches in ordinary memory,
moved by torch as any tensor), interleaved run by run."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import readers.batching.collate as collate_module
from readers import PackedDataset, PackedIterableDataset, collate

Case = tuple[str, Callable[[], Dataset[Any]], bool, int]  # name, dataset, shuffle, epochs


def packed_copies(src: Path, work: Path) -> dict[str, Path]:
    """`src` packed as wds, lmdb and npy (224x224) under `work`, once."""
    extra = {"wds": ["--shard-samples", "625"], "lmdb": [],
             "npy": ["--size", "224x224", "--fit", "stretch"]}
    copies = {}
    for fmt, options in extra.items():
        dst = work / f"packed.{fmt}"
        if not (dst / "index.json").exists():
            subprocess.run([sys.executable, "-c", "from pack_cli import main; main()",
                            "convert", str(src), str(dst), "--to", fmt, "-q", *options],
                           check=True, stdout=sys.stderr)
        copies[fmt] = dst
    return copies


def cases(copies: dict[str, Path], raw_epochs: int) -> list[Case]:
    return [
        ("wds raw (PackedIterableDataset)",
         lambda: PackedIterableDataset(copies["wds"], decode="raw"), False, raw_epochs),
        ("lmdb raw (PackedDataset, shuffled)",
         lambda: PackedDataset(copies["lmdb"], decode="raw"), True, raw_epochs),
        ("npy 224x224 stored (PackedDataset, shuffled)",
         lambda: PackedDataset(copies["npy"]), True, raw_epochs),
        ("lmdb decoded to 224x224 (PackedDataset, shuffled)",
         lambda: PackedDataset(copies["lmdb"], size=(224, 224)), True, 1),
    ]


_SWITCHES = ((collate_module, "worker_pool"), (collate_module, "shared_buffer"))


@contextmanager
def pool(on: bool) -> Iterator[None]:
    """The pool as shipped, or off: no worker pool, batches in ordinary memory (forked
    workers inherit the switch)."""
    saved = [getattr(module, name) for module, name in _SWITCHES]
    if not on:
        for module, name in _SWITCHES:
            setattr(module, name, _ordinary if name == "shared_buffer" else _no_pool)
    try:
        yield
    finally:
        for (module, name), value in zip(_SWITCHES, saved, strict=True):
            setattr(module, name, value)


def _no_pool() -> None:
    return None


def _ordinary(shape: tuple[int, ...], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def images_per_second(case: Case) -> float:
    """One untimed epoch, then `epochs` timed ones, batch 64, 2 persistent workers."""
    _, make, shuffle, epochs = case
    loader = DataLoader(make(), batch_size=64, num_workers=2, shuffle=shuffle,
                        collate_fn=collate, persistent_workers=True)
    for _ in loader:
        pass
    count, start = 0, time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            count += len(batch[1])
    return count / (time.perf_counter() - start)


def measure(all_cases: list[Case], runs: int,
            progress: Callable[[str], None]) -> dict[tuple[str, bool], list[float]]:
    """Each case with the pool on and off, the order alternating run by run."""
    rates: dict[tuple[str, bool], list[float]] = {}
    for run in range(runs):
        for case in all_cases:
            for on in ((True, False) if run % 2 == 0 else (False, True)):
                with pool(on):
                    rate = images_per_second(case)
                rates.setdefault((case[0], on), []).append(rate)
                progress(f"run {run + 1}: {case[0]}, pool {'on' if on else 'off'}: {rate:,.0f}/s")
    return rates


def markdown(all_cases: list[Case], rates: dict[tuple[str, bool], list[float]]) -> str:
    lines = ["| reader | pool on img/s | pool off img/s | off / on |", "|---|---:|---:|---:|"]
    for name, *_ in all_cases:
        on, off = (statistics.median(rates[(name, state)]) for state in (True, False))
        lines.append(f"| {name} | {on:,.0f} | {off:,.0f} | {off / on:.2f}x |")
    return "\n".join(lines)
