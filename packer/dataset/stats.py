"""`pack stats` / `packer.stats`: what a training recipe wants to know about a dataset.

    mean, std        per channel (R, G, B) over every stored pixel, in 0-1: the numbers
                     `torchvision.transforms.Normalize(mean, std)` takes. Population std
                     (over all pixels of all images), exact up to float rounding. The
                     stored pixels: after any pack-time --resize/--size, before any
                     train-time resize or crop.
    image sizes      width, height and aspect ratio (width / height) histograms
    classes          samples per class; imbalance = largest / smallest class
    bytes            stored bytes per sample: mean, median, 95th percentile
    field values     counts of each value of str and int fields (up to MAX_DISTINCT
                     distinct values; a field with more is listed as not categorical)

One parallel pass reads every sample (`run_pass`) and decodes all of them, or, with
`max_pixel_samples=N`, the N whose xxh3_64(key, PIXEL_SAMPLE_SEED) is smallest: mean and
std are then those of a fixed, key-chosen sample (the same one on every run; its own
seed, so that it is not the val split `pack split` makes with its default seed 0), while
sizes, classes, bytes and field values stay exact over all samples, at about the cost of
`pack verify`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core.fields import FieldType, decode_value
from packer.core.index import SampleTable, open_dataset
from packer.dataset.splits import key_hashes
from packer.dataset.stats_pass import PassResult, run_pass

__all__ = ["DatasetStats", "Histogram", "stats"]

NUM_BINS = 10  # bins of the size and aspect histograms
TOP_VALUES = 20  # values listed per field
PIXEL_SAMPLE_SEED = 0x57A75  # the key-hash seed of --pixel-samples: not a split's (0 by default)


@dataclass(frozen=True)
class Histogram:
    """Counts of values in bins: bin k holds edges[k] <= v < edges[k+1] (the last bin
    includes its right edge); min, max and mean of the values too."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    min: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: npt.NDArray[np.float64] | npt.NDArray[np.int64]) -> Histogram:
        if not len(values):
            return cls((), (), 0.0, 0.0, 0.0)
        low, high = float(values.min()), float(values.max())
        bins = 1 if low == high else NUM_BINS
        counts, edges = np.histogram(values, bins=bins, range=(low, high if high > low
                                                                else low + 1))
        return cls(tuple(edges.tolist()), tuple(counts.tolist()), low, high,
                   float(values.mean()))


@dataclass(frozen=True)
class DatasetStats:
    """The facts of `packer.stats(path)` (module docstring); `to_json()` is --json."""

    path: str
    format: str
    num_samples: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    num_pixels: int
    num_pixel_samples: int  # samples whose pixels mean and std cover (all, or N)
    width: Histogram
    height: Histogram
    aspect: Histogram
    classes: dict[str, int]
    imbalance: float | None  # largest / smallest class; None when a class is empty
    bytes_mean: float
    bytes_p50: float
    bytes_p95: float
    field_values: dict[str, dict[str, int]]  # field -> value (as text) -> samples
    not_categorical: tuple[str, ...]  # str/int fields with more than MAX_DISTINCT values
    seconds: float

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["pixels"] = "stored"  # over the stored pixels (module docstring)
        return data


def stats(path: str | Path, workers: int | None = None,
          max_pixel_samples: int | None = None) -> DatasetStats:
    """Read every sample of the dataset at `path` once (on `workers` threads, default one
    per CPU), decode all of them or `max_pixel_samples`, and summarize (module docstring)."""
    began = time.perf_counter()
    folder = Path(path)
    index, table = open_dataset(folder)
    decode = _pixel_samples(table, max_pixel_samples)
    result = run_pass(folder, index, workers, decode)
    counts = np.bincount(np.asarray(table.labels), minlength=len(index.class_names))
    mean, std = _mean_std(result)
    sizes = result.num_bytes
    aspect = result.widths / np.maximum(result.heights, 1)
    kinds = {spec.name: spec.type for spec in index.fields}
    return DatasetStats(
        path=str(folder), format=index.format, num_samples=index.num_samples,
        mean=mean, std=std, num_pixels=result.tally.num_pixels,
        num_pixel_samples=index.num_samples if decode is None else int(decode.sum()),
        width=Histogram.of(result.widths), height=Histogram.of(result.heights),
        aspect=Histogram.of(aspect),
        classes={name: int(counts[c]) for c, name in enumerate(index.class_names)},
        imbalance=_imbalance(counts),
        bytes_mean=float(sizes.mean()) if len(sizes) else 0.0,
        bytes_p50=_percentile(sizes, 50), bytes_p95=_percentile(sizes, 95),
        field_values={name: _top(kinds[name], counter.most_common())
                      for name, counter in sorted(result.tally.values.items())},
        not_categorical=tuple(sorted(result.uncounted)),
        seconds=time.perf_counter() - began)


def _pixel_samples(table: SampleTable, limit: int | None) -> npt.NDArray[np.bool_] | None:
    """Which samples to decode: None (all), or the `limit` of smallest key hash."""
    if limit is not None and limit < 1:
        raise ValueError(f"max_pixel_samples must be at least 1 (or None: all), not {limit}")
    if limit is None or limit >= len(table):
        return None
    chosen = np.zeros(len(table), bool)
    chosen[np.argsort(key_hashes(table, PIXEL_SAMPLE_SEED), kind="stable")[:limit]] = True
    return chosen


def _mean_std(result: PassResult) -> tuple[tuple[float, float, float],
                                            tuple[float, float, float]]:
    """Per-channel mean and population std in 0-1, from exact integer sums."""
    n = result.tally.num_pixels
    if not n:
        return (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
    sums, squares = result.tally.sums, result.tally.squares
    mean = [s / n / 255 for s in sums]
    # n * sum(x^2) - sum(x)^2 in integers: no cancellation before the one division
    std = [math.sqrt((n * q - s * s) / (n * n)) / 255 for s, q in zip(sums, squares, strict=True)]
    return (mean[0], mean[1], mean[2]), (std[0], std[1], std[2])


def _imbalance(counts: npt.NDArray[np.int64]) -> float | None:
    if not len(counts) or counts.min() == 0:
        return None
    return float(counts.max() / counts.min())


def _percentile(values: npt.NDArray[np.int64], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def _top(kind: FieldType, common: list[tuple[bytes, int]]) -> dict[str, int]:
    """The TOP_VALUES most common values of a field, as text, most common first."""
    return {str(decode_value(kind, value)): count for value, count in common[:TOP_VALUES]}
