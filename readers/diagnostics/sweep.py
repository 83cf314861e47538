"""Real DataLoader runs for `pack bench` and `pack tune`: throughput, waits, peak memory.

Each configuration runs whole epochs through a plain DataLoader until its time budget
is spent or the rate is stable (the two halves of the run agree within 3%). Worker
start-up is excluded (the clock starts at the first batch). Peak memory is the
largest sum of proportional set sizes (PSS) of the main process and its workers,
sampled in a background thread: PSS splits shared pages fairly, so the sum is real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from packer.core.index import INDEX_NAME
from packer.errors import PackError
from readers.diagnostics.monitor import LoaderMonitor, batch_length
from readers.diagnostics.tuning import LoaderConfig, Measurement


def open_for_bench(path: Path, size: int | None) -> Dataset[Any]:
    """A packed dataset, or a plain image folder read file by file with the same decode."""
    from readers.datasets import PackedDataset
    from readers.diagnostics.folder import ImageFolderDataset

    decode_size = (size, size) if size else None
    if (path / INDEX_NAME).exists():
        return PackedDataset(path, size=decode_size)
    if path.is_dir():
        return ImageFolderDataset(path, size=decode_size)
    raise PackError(f"{path}: neither a packed dataset nor an image folder")


class PeakMemory:
    """Samples the PSS of this process and its children until stopped."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_pss(me))
            self._stop.wait(self.interval)


def tree_pss(process: psutil.Process) -> int:
    total = 0
    for proc in [process, *process.children(recursive=True)]:
        try:
            total += int(proc.memory_full_info().pss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def measure(dataset: Dataset[Any], config: LoaderConfig, seconds: float,
            min_batches: int = 10) -> Measurement:
    """Run the loader for about `seconds` (stopping early once stable) and measure it."""
    loader = DataLoader(dataset, shuffle=True, drop_last=False, **config.kwargs())
    if len(loader) == 0:
        raise PackError("the dataset is empty: nothing to measure")
    monitor = LoaderMonitor(loader)
    waits = monitor.waits
    samples = 0
    start: float | None = None
    with PeakMemory() as memory:
        while start is None or not _done(waits, start, seconds, min_batches):
            for batch in monitor:
                if start is None:  # the first batch pays for worker start-up: not counted
                    start = time.perf_counter()
                    waits.clear()
                    continue
                samples += batch_length(batch)
                if _done(waits, start, seconds, min_batches):
                    break
        elapsed = time.perf_counter() - start
    return _summary(config, waits, samples, elapsed, memory.peak)


def _done(waits: list[float], start: float, seconds: float, min_batches: int) -> bool:
    """Out of time, or enough batches and both halves of the run agree within 3%."""
    elapsed = time.perf_counter() - start
    if elapsed >= seconds:
        return True
    if len(waits) < 2 * min_batches or elapsed < seconds / 4:
        return False
    half = len(waits) // 2
    first, second = sum(waits[:half]), sum(waits[half:])
    return abs(first - second) <= 0.03 * max(first, second, 1e-9)


def _summary(config: LoaderConfig, waits: list[float], samples: int, elapsed: float,
             peak: int) -> Measurement:
    ordered = sorted(waits) or [0.0]
    median = ordered[len(ordered) // 2]
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return Measurement(config, samples / elapsed, len(waits) / elapsed, median, p95, peak,
                       len(waits), elapsed)


def sweep(dataset: Dataset[Any], configs: Sequence[LoaderConfig], seconds: float,
          progress: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """Measure each configuration in turn."""
    results = []
    for config in configs:
        results.append(measure(dataset, config, seconds))
        if progress is not None:
            progress(results[-1])
    return results


def sample_bytes(dataset: Dataset[Any]) -> int:
    """Bytes of one decoded sample (what the prefetch queue holds per sample)."""
    image = dataset[0][0]
    return int(image.numel() * image.element_size()) if isinstance(image, torch.Tensor) else 0
