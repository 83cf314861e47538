"""Class-balanced and per-sample weighted epoch plans: which samples an epoch draws.

Both keep the split rules of `ChunkPlan` (exactly `num_per_rank` per rank, disjoint
rank slices of one sequence that depends on (seed, epoch) only) and change only what the
sequence holds:

    class_weights   the classes are the groups of a `GroupPlan`: class c
                    gives its largest-remainder share of the epoch (frequencies
                    proportional to the weights; "balanced": equal), drawn without
                    replacement through its own successive permutations. Its samples are
                    its runs of equal labels cut at the chunk size, so a dataset packed
                    from class folders (one run per class) still reads whole chunks.
    sample_weights  systematic resampling: the epoch's N draws are the points u, u+1, ...,
                    u+N-1 (u uniform in [0, 1), seeded by (seed, epoch)) on the weights'
                    running sum scaled to N, so sample i is drawn floor or ceil of
                    N * w_i / sum(w) times (exactly that when it is whole), then shuffled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core.index import open_dataset
from readers.plan.chunks import ChunkPlan, Spans, check_epoch, epoch_rng
from readers.plan.groups import CLASS_STREAM, GroupPlan, largest_remainder

ClassWeights = str | Mapping[Any, float] | Sequence[float]
WEIGHTED_STREAM = 5


def dataset_labels(dataset: Any) -> tuple[npt.NDArray[np.int64], tuple[str, ...]]:
    """The labels of every sample and the class names of a packed dataset (or any dataset
    with `labels` and, optionally, `class_names`)."""
    labels = getattr(dataset, "labels", None)
    if labels is None and hasattr(dataset, "path") and hasattr(dataset, "index"):
        labels = open_dataset(dataset.path)[1].labels
        if getattr(dataset, "subset", None) is not None:  # a split: its positions
            labels = dataset.subset.labels(labels)
    if labels is None:
        raise TypeError(f"class_weights needs the labels of {type(dataset).__name__}: use a "
                        "PackedDataset, or give the dataset a `labels` array")
    labels = np.asarray(labels, dtype=np.int64)
    names = tuple(getattr(dataset, "class_names", ()) or ())
    return labels, names or tuple(str(c) for c in range(int(labels.max(initial=-1)) + 1))


def class_weight_vector(class_weights: ClassWeights,
                        names: Sequence[str]) -> npt.NDArray[np.float64]:
    """One weight per class from "balanced", {class id or name: weight} or a list."""
    if isinstance(class_weights, str):
        if class_weights != "balanced":
            raise ValueError(f"class_weights must be 'balanced', a mapping or a list, "
                             f"not {class_weights!r}")
        return np.ones(len(names))
    if isinstance(class_weights, Mapping):
        ids = {name: c for c, name in enumerate(names)}
        weights = np.full(len(names), np.nan)
        for key, weight in class_weights.items():
            c = ids.get(key, key)
            if not isinstance(c, (int, np.integer)) or not 0 <= c < len(names):
                raise ValueError(f"class_weights names class {key!r}, which is not one of "
                                 f"0..{len(names) - 1} or {list(names)}")
            weights[c] = weight
        missing = [names[c] for c in np.flatnonzero(np.isnan(weights)).tolist()]
        if missing:
            raise ValueError(f"class_weights gives no weight to class(es) {missing}: give "
                             "every class one (0 leaves a class out)")
        return weights
    weights = np.asarray(class_weights, dtype=np.float64)
    if weights.shape != (len(names),):
        raise ValueError(f"class_weights has {weights.size} weights for {len(names)} classes")
    return weights


def class_groups(labels: npt.NDArray[np.int64], num_classes: int,
                 chunk_size: int) -> tuple[Spans, ...]:
    """Each class's samples as spans: its runs of equal labels, cut at multiples of chunk_size."""
    n = len(labels)
    boundary = np.zeros(n, dtype=bool)
    boundary[0::chunk_size] = True
    boundary[1:] |= labels[1:] != labels[:-1]
    starts = np.flatnonzero(boundary).astype(np.int64)
    stops = np.append(starts[1:], n)
    runs = np.stack([starts, stops, np.zeros_like(starts)], axis=1)
    run_labels = labels[starts]
    return tuple(runs[run_labels == c] for c in range(num_classes))


@dataclass(frozen=True, eq=False)
class ClassSplit:
    """Class weights for a dataset, ready to plan an epoch for any world size."""

    groups: tuple[Spans, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, dataset: Any, class_weights: ClassWeights, chunk_size: int) -> ClassSplit:
        labels, names = dataset_labels(dataset)
        weights = class_weight_vector(class_weights, names)
        groups = class_groups(labels, len(names), chunk_size)
        if isinstance(class_weights, str):  # balanced over the classes that have samples
            weights = weights * np.array([len(g) > 0 for g in groups])
        empty = [names[c] for c, g in enumerate(groups) if weights[c] > 0 and len(g) == 0]
        if empty:
            raise ValueError(f"class_weights draws from class(es) {empty}, which have no "
                             "samples: give them weight 0")
        largest_remainder(weights, 0)  # bad weights fail here
        return cls(groups, tuple(weights.tolist()))

    def plan(self, num_samples: int, chunk_size: int, world_size: int, shuffle: bool,
             drop_last: bool, seed: int) -> ChunkPlan:
        counts = tuple(largest_remainder(self.weights, num_samples).tolist())
        return GroupPlan(num_samples, chunk_size, world_size, shuffle, drop_last, seed,
                         groups=self.groups, counts=counts, stream=CLASS_STREAM)


@dataclass(frozen=True, eq=False)
class SampleWeightPlan(ChunkPlan):
    """A ChunkPlan whose epoch is a systematic weighted resample (module docstring)."""

    weights: npt.NDArray[np.float64] = field(default_factory=lambda: np.ones(0))

    def sequence(self, epoch: int) -> Spans:
        rng = epoch_rng(self.seed, check_epoch(epoch), WEIGHTED_STREAM)
        running = np.cumsum(self.weights) / self.weights.sum() * self.num_samples
        points = rng.random() + np.arange(self.num_samples)
        indices = np.searchsorted(running, points, side="right").astype(np.int64)
        indices = np.minimum(indices, len(self.weights) - 1)[rng.permutation(self.num_samples)]
        spans: Spans = np.stack([indices, indices + 1, np.zeros_like(indices)], axis=1)
        return spans


@dataclass(frozen=True, eq=False)
class SampleSplit:
    """Per-sample weights, checked, ready to plan an epoch for any world size."""

    weights: npt.NDArray[np.float64]

    @classmethod
    def of(cls, dataset: Any, sample_weights: npt.ArrayLike) -> SampleSplit:
        weights = np.asarray(sample_weights, dtype=np.float64)
        if weights.shape != (len(dataset),):
            raise ValueError(f"sample_weights has shape {weights.shape}; the dataset has "
                             f"{len(dataset)} samples: give one weight per sample")
        largest_remainder(weights, 0)  # bad weights fail here
        return cls(weights)

    def plan(self, num_samples: int, chunk_size: int, world_size: int, shuffle: bool,
             drop_last: bool, seed: int) -> ChunkPlan:
        return SampleWeightPlan(num_samples, chunk_size, world_size, shuffle, drop_last, seed,
                                weights=self.weights)


def weighted_split(dataset: Any, class_weights: ClassWeights | None,
                   sample_weights: npt.ArrayLike | None, chunk_size: int,
                   ) -> ClassSplit | SampleSplit | None:
    """The weighting a sampler was asked for, checked now (bad weights fail at construction)."""
    if class_weights is not None and sample_weights is not None:
        raise ValueError("give one of class_weights and sample_weights")
    if class_weights is not None:
        return ClassSplit.of(dataset, class_weights, chunk_size)
    if sample_weights is not None:
        return SampleSplit.of(dataset, sample_weights)
    return None
