"""Class-balanced and per-sample weighted sampling (readers.sampling.weighted): exact class counts,
no repeat before a class is used up, disjoint equal rank splits, loaders and resume."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from readers.plan.chunks import expand
from readers.plan.groups import largest_remainder

COUNTS = (12, 9, 3)  # an unbalanced dataset: 24 samples in 3 classes


class Labelled:
    """A stand-in dataset: only its labels matter to the sampler."""

    def __init__(self, labels: list[int]) -> None:
        self.labels = np.array(labels)

    def __len__(self) -> int:
        return len(self.labels)


@pytest.fixture(scope="module")
def unbalanced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("weighted")
    src = make_sample_folder(root / "src", count=36, classes=3, min_side=16, max_side=24)
    for folder, keep in zip(sorted(src.iterdir()), COUNTS, strict=True):
        for extra in sorted(folder.iterdir())[keep:]:
            extra.unlink()
    convert(src, root / "lmdb", "lmdb", run=ConvertOptions(workers=0,
                                                           shards=ShardOptions(max_samples=8)))
    return root / "lmdb"


def drawn(sampler: ChunkSampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return [int(i) for i in sampler]


labels_st = st.lists(st.integers(0, 3), min_size=2, max_size=60)


@settings(max_examples=60, deadline=None)
@given(labels_st, st.integers(1, 3), st.sampled_from([1, 2, 4]))
def test_balanced_counts_are_exact_and_ranks_disjoint(labels: list[int], world: int,
                                                      chunk: int) -> None:
    if len(labels) < world:
        return
    data = Labelled(labels)
    data.chunk_size = chunk  # type: ignore[attr-defined]
    samplers = [ChunkSampler(data, class_weights="balanced",
                             partition=PartitionOptions(rank=r, world_size=world, drop_last=False,
                                                        buffer_size=3)) for r in range(world)]
    ranks = [drawn(s, 2) for s in samplers]
    assert [len(r) for r in ranks] == [len(samplers[0])] * world
    plan = samplers[0].plan
    whole = expand(plan.epoch_spans(2))
    assert sorted(i for r in ranks for i in r) == sorted(whole[0].tolist())  # one cut sequence
    present = sorted(set(labels))
    expected = largest_remainder([1.0] * len(present), len(labels))
    real = np.array(labels)[whole[0][~whole[1]]]
    assert [int((real == c).sum()) for c in present] == expected.tolist()


@settings(max_examples=40, deadline=None)
@given(labels_st, st.integers(0, 3))
def test_a_class_shows_every_sample_before_repeating(labels: list[int], seed: int) -> None:
    data = Labelled(labels)
    sampler = ChunkSampler(data, class_weights="balanced", seed=seed,
                           partition=PartitionOptions(buffer_size=0))
    draws = [i for e in range(3) for i in drawn(sampler, e)]
    per_class = Counter(draws)
    for c in set(labels):
        members = [i for i, label in enumerate(labels) if label == c]
        seen = [per_class[i] for i in members]
        assert max(seen) - min(seen) <= 1, f"class {c} repeated a sample before showing all"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 5), min_size=1, max_size=40), st.integers(0, 4))
def test_sample_weights_draw_each_sample_its_share_rounded(weights: list[float],
                                                           epoch: int) -> None:
    if sum(weights) <= 0:
        with pytest.raises(ValueError, match="not all zero"):
            ChunkSampler(Labelled([0] * len(weights)), sample_weights=np.array(weights))
        return
    sampler = ChunkSampler(Labelled([0] * len(weights)), sample_weights=np.array(weights))
    counts = np.bincount(drawn(sampler, epoch), minlength=len(weights))
    share = np.array(weights) / sum(weights) * len(weights)
    assert counts.sum() == len(sampler) == len(weights)
    assert (counts >= np.floor(share - 1e-9)).all() and (counts <= np.ceil(share + 1e-9)).all()
    assert drawn(sampler, epoch) == drawn(sampler, epoch)


def test_class_weights_by_name_or_list_and_the_errors(unbalanced: Path) -> None:
    ds = PackedDataset(unbalanced)
    by_name = ChunkSampler(ds, class_weights={"class_00": 1, "class_01": 1, "class_02": 2})
    by_list = ChunkSampler(ds, class_weights=[1, 1, 2])
    assert drawn(by_name, 0) == drawn(by_list, 0)
    assert Counter(ds[i][1] for i in drawn(by_list, 0)) == {0: 6, 1: 6, 2: 12}
    with pytest.raises(ValueError, match=r"no weight to class\(es\) \['class_02'\]"):
        ChunkSampler(ds, class_weights={0: 1, 1: 1})
    with pytest.raises(ValueError, match="not one of"):
        ChunkSampler(ds, class_weights={"dog": 1})
    with pytest.raises(ValueError, match="2 weights for 3 classes"):
        ChunkSampler(ds, class_weights=[1, 1])
    with pytest.raises(ValueError, match="'balanced'"):
        ChunkSampler(ds, class_weights="uniform")
    with pytest.raises(ValueError, match="give one of"):
        ChunkSampler(ds, class_weights="balanced", sample_weights=np.ones(24))
    with pytest.raises(ValueError, match="one weight per sample"):
        ChunkSampler(ds, sample_weights=np.ones(5))
    with pytest.raises(TypeError, match="labels"):
        ChunkSampler(range(5), class_weights="balanced")


def labels_read(loader: Any) -> list[int]:
    return [int(label) for _, labels in loader for label in labels]


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, "fork"), (2, "spawn")])
def test_balanced_loader_over_lmdb(unbalanced: Path, workers: int, context: str | None) -> None:
    ds = PackedDataset(unbalanced, size=(8, 8))
    sampler = ChunkSampler(ds, seed=3, class_weights="balanced")
    sampler.set_epoch(1)
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    read = labels_read(DataLoader(ds, batch_size=5, sampler=sampler, num_workers=workers,
                                  **extra))
    assert Counter(read) == {0: 8, 1: 8, 2: 8}
    sampler.set_epoch(1)
    assert read == [ds[i][1] for i in sampler]  # the sampler's order, whatever the workers


def test_sampler_resumes_mid_epoch(unbalanced: Path) -> None:
    ds = PackedDataset(unbalanced)
    sampler = ChunkSampler(ds, class_weights="balanced")
    stream = iter(sampler)
    head = list(islice(stream, 10))
    state = sampler.state_dict()
    again = ChunkSampler(ds, class_weights="balanced")
    again.load_state_dict(state)
    assert head + list(again) == drawn(ChunkSampler(ds, class_weights="balanced"), 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_class_weights_read_class_chunks(unbalanced: Path, workers: int) -> None:
    it = PackedIterableDataset(unbalanced, size=(8, 8), class_weights=[1, 1, 2],
                               partition=PartitionOptions(chunk_size=4))
    extra: dict[str, Any] = {"multiprocessing_context": "fork"} if workers else {}
    read = labels_read(DataLoader(it, batch_size=5, num_workers=workers, **extra))
    assert len(read) == len(it) == 24 and Counter(read) == {0: 6, 1: 6, 2: 12}
