"""LoaderMonitor: measure how long a training loop waits for its data.

    for batch in LoaderMonitor(loader, log_every=100):
        step(batch)

The wait for each batch is the time `next()` on the loader takes; the time outside is
everything the loop does between batches (the training step). The starved fraction,
wait / (wait + outside), says how much of the run the GPU would idle for data.
Two `perf_counter` calls and one list append per batch keep the overhead near zero.
Where the loader's dataset skips damaged samples (`on_error="skip"`), the figures and
the log line also say how many it skipped so far (its `num_skipped`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any, Generic, TypeVar

import numpy as np

Batch = TypeVar("Batch")
LOG = logging.getLogger("readers.monitor")  # the logger name users configure (the docs give it)


def batch_length(batch: Any) -> int:
    """Samples in a batch: the length of the batch or of its first field."""
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    if isinstance(first, Sized):
        return len(first)
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else 1


class LoaderMonitor(Generic[Batch]):
    """Wraps any iterable of batches (a DataLoader, ours or not) and times the waits.

    `clock` (seconds, `time.perf_counter` unless given) times them: a test passes one that
    its loader and loop advance, so that its figures do not depend on how busy the
    machine is.
    """

    def __init__(self, loader: Iterable[Batch], log_every: int = 0,
                 logger: logging.Logger | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.loader = loader
        self.clock = clock
        self.log_every = log_every
        self.logger = logger or LOG
        self.waits: list[float] = []
        self.outside = 0.0
        self.samples = 0
        self.elapsed = 0.0

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Batch]:
        clock = self.clock
        iterator = iter(self.loader)
        waits = self.waits
        started = clock()
        try:
            while True:
                before = clock()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                handed = clock()
                waits.append(handed - before)
                self.samples += batch_length(batch)
                if self.log_every and len(waits) % self.log_every == 0:
                    self.logger.info(self.line())
                yield batch
                self.outside += clock() - handed
        finally:
            self.elapsed += clock() - started

    def stats(self) -> dict[str, float]:
        """Starved fraction, mean and p95 wait per batch (s), images/s, batches."""
        waits = np.asarray(self.waits)
        total_wait = float(waits.sum()) if len(waits) else 0.0
        busy = total_wait + self.outside
        return {
            "batches": float(len(waits)),
            "samples": float(self.samples),
            "starved_fraction": total_wait / busy if busy > 0 else 0.0,
            "mean_wait_s": float(waits.mean()) if len(waits) else 0.0,
            "p95_wait_s": float(np.percentile(waits, 95)) if len(waits) else 0.0,
            "images_per_s": self.samples / busy if busy > 0 else 0.0,
            "skipped": float(self.skipped()),
        }

    def skipped(self) -> int:
        """Samples the loader's dataset skipped (readers' on_error="skip"); 0 for a loader
        whose dataset does not count them."""
        count = getattr(getattr(self.loader, "dataset", None), "num_skipped", 0)
        return count if isinstance(count, int) else 0

    def line(self) -> str:
        """One log line with the figures so far."""
        s = self.stats()
        return (f"loader: {int(s['batches'])} batches, starved {s['starved_fraction']:.0%}, "
                f"wait mean {s['mean_wait_s'] * 1e3:.1f} ms p95 {s['p95_wait_s'] * 1e3:.1f} ms, "
                f"{s['images_per_s']:,.0f} images/s"
                + (f", skipped {int(s['skipped'])} damaged" if s["skipped"] else ""))
