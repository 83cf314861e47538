"""Two real torch.distributed (gloo) processes, each with a 2-worker DataLoader.

Every rank gathers what it read; together they must cover the dataset exactly once
(modulo the documented drop / flagged-padding rule) in the same number of samples
and batches per rank.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.core.index import open_dataset
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from readers.sampling.sampler import PAD_LABEL
from tests.helpers import run_ranks

NUM = 45  # odd: two ranks must drop or pad one sample
WORLD = 2
SIZE = (16, 16)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ddp")
    src = make_sample_folder(root / "src", count=NUM, classes=3, min_side=24, max_side=40)
    run = ConvertOptions(workers=0, shards=ShardOptions(max_samples=8))
    convert(src, root / "wds", "wds", run=run)
    return root / "wds"


def read_rank(path: Path, style: str, drop_last: bool) -> dict[str, Any]:
    """What this rank reads in epoch 1: (label, key) per sample, and its batch count.

    Workers fork, as they do under torchrun (a spawned process would spawn them too,
    and each would import torch again).
    """
    if style == "iterable":
        data: Any = PackedIterableDataset(path, size=SIZE, with_keys=True,
                                          partition=PartitionOptions(drop_last=drop_last,
                                                                     chunk_size=4,
                                                                     buffer_size=8))
        data.set_epoch(1)
        loader = DataLoader(data, batch_size=4, num_workers=2, multiprocessing_context="fork")
        length = len(data)
    else:
        data = PackedDataset(path, size=SIZE, with_keys=True)
        sampler = ChunkSampler(data, partition=PartitionOptions(drop_last=drop_last))
        sampler.set_epoch(1)
        loader = DataLoader(data, batch_size=4, num_workers=2, sampler=sampler,
                            multiprocessing_context="fork")
        length = len(sampler)
    samples, batches = [], 0
    for _, labels, keys in loader:
        samples += list(zip(labels.tolist(), keys, strict=True))
        batches += 1
    return {"len": length, "samples": samples, "batches": batches}


def rank_main(rank: int, port: int, path: Path, out: Path) -> None:
    """One DDP process: rank and world size come from the process group, not arguments."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        results = {f"{style}-{drop}": read_rank(path, style, drop)
                   for style in ("iterable", "map") for drop in (True, False)}
        gathered: list[Any] = [None] * WORLD
        dist.all_gather_object(gathered, results)
        if rank == 0:
            out.write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def test_two_ranks_read_every_sample_once(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "gathered.json"
    assert run_ranks(rank_main, (dataset, out), WORLD) == [0] * WORLD
    gathered = json.loads(out.read_text())
    keys = open_dataset(dataset)[1].keys()
    for name in gathered[0]:
        drop_last = name.endswith("True")
        ranks = [results[name] for results in gathered]
        per_rank = NUM // WORLD if drop_last else -(-NUM // WORLD)
        assert [r["len"] for r in ranks] == [per_rank] * WORLD, name
        assert [len(r["samples"]) for r in ranks] == [per_rank] * WORLD, name
        assert ranks[0]["batches"] == ranks[1]["batches"], name
        everything = [tuple(sample) for r in ranks for sample in r["samples"]]
        real = [key for label, key in everything if label != PAD_LABEL]
        padded = [key for label, key in everything if label == PAD_LABEL]
        assert len(real) == len(set(real)), f"{name}: a sample was read twice"
        assert set(real) <= set(keys)
        if drop_last:
            assert (len(real), padded) == (NUM - 1, []), name
        else:
            assert sorted(real) == sorted(keys) and len(padded) == 1, name
