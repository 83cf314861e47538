"""Pure rules behind `pack tune`: pick a DataLoader configuration and say what to watch.

Kept free of torch and timing so the logic is tested on synthetic measurements.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoaderConfig:
    """The DataLoader settings a sweep varies."""

    num_workers: int
    prefetch_factor: int | None
    batch_size: int
    pin_memory: bool = False

    def __post_init__(self) -> None:
        if self.num_workers < 0 or self.batch_size < 1:
            raise ValueError(f"bad loader configuration {self}")

    @property
    def cost(self) -> tuple[int, int, bool]:
        """Smaller is cheaper: fewer processes, then a shorter queue, then no pinning."""
        return (self.num_workers, self.prefetch_factor or 0, self.pin_memory)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `torch.utils.data.DataLoader`."""
        args: dict[str, Any] = {"batch_size": self.batch_size, "num_workers": self.num_workers,
                                "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            args["prefetch_factor"] = self.prefetch_factor or 2
            args["persistent_workers"] = True
        return args

    def label(self) -> str:
        prefetch = self.prefetch_factor if self.num_workers else "-"
        return (f"workers={self.num_workers} prefetch={prefetch} batch={self.batch_size} "
                f"pin={'on' if self.pin_memory else 'off'}")


@dataclass(frozen=True)
class Measurement:
    """What one configuration did in a real run."""

    config: LoaderConfig
    images_per_s: float
    batches_per_s: float
    median_wait_s: float
    p95_wait_s: float
    peak_memory_bytes: int
    batches: int
    seconds: float


def queue_memory_bytes(config: LoaderConfig, bytes_per_sample: int) -> int:
    """Batches in flight times their size: workers x prefetch x batch x bytes per sample."""
    in_flight = config.num_workers * (config.prefetch_factor or 2) if config.num_workers else 1
    return in_flight * config.batch_size * bytes_per_sample


def recommend(results: Sequence[Measurement], tolerance: float = 0.05) -> Measurement:
    """The cheapest configuration within `tolerance` of the best throughput."""
    if not results:
        raise ValueError("no measurements to recommend from")
    best = max(result.images_per_s for result in results)
    good = [r for r in results if r.images_per_s >= (1 - tolerance) * best]
    return min(good, key=lambda r: r.config.cost)


def warnings_for(results: Sequence[Measurement], chosen: Measurement, cpus: int,
                 available_bytes: int, bytes_per_sample: int) -> list[str]:
    """Reasons to be careful with the recommendation, each with its cause."""
    notes = []
    estimate = queue_memory_bytes(chosen.config, bytes_per_sample)
    if estimate > available_bytes / 4:
        notes.append(f"prefetch queue needs ~{estimate / 2**20:,.0f} MiB, over a quarter of the "
                     f"{available_bytes / 2**20:,.0f} MiB available: lower prefetch_factor or "
                     "batch_size")
    most = max(r.config.num_workers for r in results)
    if most > cpus:
        notes.append(f"the sweep asked for {most} workers on {cpus} CPU cores: workers beyond "
                     "the core count compete for CPU and rarely help")
    plateau = plateau_workers(results)
    if plateau is not None:
        notes.append(f"throughput stops growing beyond {plateau} workers: the loader is I/O- or "
                     "memory-bound there, or limited by the main process")
    return notes


def plateau_workers(results: Sequence[Measurement], gain: float = 0.10) -> int | None:
    """The worker count after which adding workers gains under `gain`, if any."""
    best_by_workers: dict[int, float] = {}
    for r in results:
        best_by_workers[r.config.num_workers] = max(best_by_workers.get(r.config.num_workers, 0.0),
                                                    r.images_per_s)
    counts = sorted(best_by_workers)
    for low, high in itertools.pairwise(counts):
        if low > 0 and best_by_workers[high] < (1 + gain) * best_by_workers[low]:
            return low
    return None


def feed_verdict(images_per_s: float, batch_size: int, model_step_ms: float | None = None,
                 target_rate: float | None = None) -> str | None:
    """Whether the loader keeps a training step of this length (or this rate) fed."""
    if model_step_ms is not None:
        target_rate = batch_size / (model_step_ms / 1000.0)
    if target_rate is None:
        return None
    ratio = images_per_s / target_rate
    if ratio >= 1.0:
        return (f"keeps up: {images_per_s:,.0f} images/s against {target_rate:,.0f} needed "
                f"({ratio:.1f}x, {ratio - 1:.0%} headroom)")
    return (f"falls short: {images_per_s:,.0f} images/s against {target_rate:,.0f} needed "
            f"(the step would wait {1 - ratio:.0%} of the time for data)")
