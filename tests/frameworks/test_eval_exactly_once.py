"""Evaluation exactly once across N ranks with equal step counts: drop_last=False pads every
rank to the same length with repeats flagged by label -1, and a metric that masks them
counts every sample once (the recipe in docs/guides/frameworks.md; ranks simulated by their
split options, as a process group gives them)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from packer.core.index import open_dataset
from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions
from readers.sampling.sampler import PAD_LABEL
from tests.helpers import pack_wds

NUM, BATCH = 61, 4  # 61 samples: no world size here divides them


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("eval"), NUM, 16, min_side=8, max_side=12)


def evaluation_loader(path: Path, reader: str, rank: int, world: int) -> DataLoader[Any]:
    split = PartitionOptions(drop_last=False, rank=rank, world_size=world)
    if reader == "map":
        ds = PackedDataset(path, size=(8, 8), with_keys=True)
        return DataLoader(ds, batch_size=BATCH, sampler=ChunkSampler(ds, shuffle=False,
                                                                      partition=split))
    stream = PackedIterableDataset(path, size=(8, 8), with_keys=True, shuffle=False,
                                   partition=split, batch_size=BATCH)
    return DataLoader(stream, batch_size=BATCH, num_workers=2, multiprocessing_context="fork")


@pytest.mark.parametrize("reader", ["map", "iterable"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_sample_is_evaluated_once_in_equal_steps(path: Path, reader: str,
                                                       world: int) -> None:
    counted: Counter[str] = Counter()
    steps = set()
    for rank in range(world):
        loader = evaluation_loader(path, reader, rank, world)
        batches = list(loader)
        steps.add(len(batches))
        assert len(batches) == len(loader)
        for _, labels, keys in batches:
            real = labels != PAD_LABEL  # the mask a metric applies before its all_reduce
            counted.update(key for key, keep in zip(keys, real.tolist(), strict=True) if keep)
            assert torch.all(labels[~real] == PAD_LABEL)
    assert len(steps) == 1, f"ranks take different step counts: {steps}"
    assert counted == Counter(open_dataset(path)[1].keys()), "not every sample exactly once"
