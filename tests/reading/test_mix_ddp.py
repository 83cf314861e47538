"""Mix under two real torch.distributed (gloo) processes, each with a 2-worker DataLoader:
together the ranks read the epoch's draws exactly once, in equal counts per rank."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import Mix, PackedIterableDataset
from readers.options import PartitionOptions
from tests.helpers import run_ranks

WORLD = 2
EPOCH_SIZE = 33  # odd: drop_last drops one; 22 + 11 draws, each within a source's size


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("mix-ddp")
    run = ConvertOptions(workers=0, shards=ShardOptions(max_samples=8))
    paths = []
    for name, fmt, count in (("a", "wds", 30), ("b", "hdf5", 14)):
        src = make_sample_folder(root / name, count=count, classes=2, min_side=16,
                                 max_side=24, seed=count)
        convert(src, root / fmt, fmt, run=run)
        paths.append(str(root / fmt))
    return paths


def read_rank(paths: list[str]) -> dict[str, Any]:
    parts = [PackedIterableDataset(p, decode="raw", with_keys=True,
                                   partition=PartitionOptions(chunk_size=4)) for p in paths]
    mix = Mix(parts, weights=[2, 1], epoch_size=EPOCH_SIZE, with_source=True, batch_size=4)
    mix.set_epoch(0)  # the first pass of each source: no draw repeats
    loader = DataLoader(mix, batch_size=4, num_workers=2, multiprocessing_context="fork",
                        collate_fn=list)
    samples, batches = [], 0
    for batch in loader:
        samples += [[s[3], s[2]] for s in batch]
        batches += 1
    return {"len": len(mix), "samples": samples, "batches": batches}


def rank_main(rank: int, port: int, paths: list[str], out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        gathered: list[Any] = [None] * WORLD
        dist.all_gather_object(gathered, read_rank(paths))
        if rank == 0:
            out.write_text(json.dumps(gathered))
    finally:
        dist.destroy_process_group()


def test_two_ranks_mix_every_draw_once(sources: list[str], tmp_path: Path) -> None:
    out = tmp_path / "gathered.json"
    assert run_ranks(rank_main, (sources, out), WORLD) == [0] * WORLD
    ranks = json.loads(out.read_text())
    per_rank = EPOCH_SIZE // WORLD
    assert [r["len"] for r in ranks] == [len(r["samples"]) for r in ranks] == [per_rank] * 2
    assert ranks[0]["batches"] == ranks[1]["batches"] == 4
    everything = [tuple(s) for r in ranks for s in r["samples"]]
    assert len(set(everything)) == len(everything), "a draw was read twice"
    by_source = Counter(source for source, _ in everything)
    assert by_source[0] + by_source[1] == EPOCH_SIZE - 1
    assert by_source[0] in (21, 22) and by_source[1] in (10, 11)
