"""The logic of scripts/bench_in_memory.py: what in_memory=True costs in RAM, and its speed.

RAM: each case runs in a fresh process (nothing else it holds is counted): a DataLoader
with 2 persistent workers reads one epoch of the npy dataset in shuffled batches of 64
(default_collate), then the PSS (proportional
set size: a page shared by k processes counts 1/k in each) of the main process and its
workers is summed. The figure is that sum less the same sum for a dataset that holds
no data, divided by the size of the data:

    ours          PackedDataset(npy, in_memory=True): one copy in a tmpfs, mapped by all
    naive fork    a Dataset that loads every sample into a list of arrays; fork workers
    naive spawn   the same list, pickled to spawn workers (a copy each)

Speed: the same map-style reads (batches of 64 in a seeded random order, decode="raw")
from the disk folder with its files in the page cache (read once before timing) and
from the in-RAM copy, in turns, medians of `runs` timings of 5 passes each.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from torch.utils.data import DataLoader, Dataset

from packer import ConvertOptions, convert
from packer.core.index import read_index
from packer.encode import EncodeOptions
from packer.testing import make_sample_folder
from readers import PackedDataset

PSS_CASES = ("empty fork", "ours", "naive fork", "empty spawn", "naive spawn")
BASE = {"ours": "empty fork", "naive fork": "empty fork", "naive spawn": "empty spawn"}
BATCH = 64


def pack(work: Path, count: int, side: int) -> dict[str, Path]:
    """npy (side x side pixels) and lmdb made from one generated folder, cached in `work`."""
    src = work / f"src-{count}"
    if not src.is_dir():
        make_sample_folder(src, count=count, classes=4, min_side=side, max_side=2 * side)
    out = {}
    for fmt in ("npy", "lmdb"):
        folder = work / f"{fmt}-{count}-{side}"
        if not (folder / "index.json").exists():
            options = EncodeOptions(size=(side, side)) if fmt == "npy" else None
            convert(src, folder, fmt, encode=options, run=ConvertOptions(workers=0))
        out[fmt] = folder
    return out


class NaiveList(Dataset[tuple[np.ndarray, int]]):
    """What a user writes to keep a dataset in RAM: every sample loaded into a list."""

    def __init__(self, folder: Path) -> None:
        disk = PackedDataset(folder, decode="raw")
        self.samples = [(np.array(image), label)
                        for image, label in (disk[i] for i in range(len(disk)))]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.samples[i]


class Empty(Dataset[tuple[np.ndarray, int]]):
    """The baseline: samples of the same shape, all one array, so the loader's own costs
    (batches made, sent and freed) are the same as the others' and the data costs nothing."""

    def __init__(self, num_samples: int, shape: tuple[int, ...]) -> None:
        self.num_samples = num_samples
        self.image = np.zeros(shape, np.uint8)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.image, 0


def pss_case(case: str, folder: Path) -> dict[str, Any]:
    """One epoch with 2 persistent workers; the PSS of the main process plus the workers."""
    disk = PackedDataset(folder, decode="raw")
    dataset: Dataset[Any] = (
        Empty(len(disk), np.asarray(disk[0][0]).shape) if case.startswith("empty")
        else PackedDataset(folder, decode="raw", in_memory=True) if case == "ours"
        else NaiveList(folder))
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True,
                        shuffle=True,  # default_collate: batches as a user gets them
                        multiprocessing_context="spawn" if case.endswith("spawn") else "fork")
    batches = iter(loader)
    seen = sum(len(labels) for _, labels in batches)
    pids = [0, *(worker.pid for worker in batches._workers)]  # type: ignore[attr-defined]
    pss = sum(psutil.Process(pid or None).memory_full_info().pss for pid in pids)
    return {"case": case, "pss": pss, "samples": seen}


def run_pss(folder: Path, script: Path) -> dict[str, int]:
    """Every case in a fresh process (`script --case NAME FOLDER` prints its JSON)."""
    result = {}
    for case in PSS_CASES:
        out = subprocess.run([sys.executable, str(script), "--case", case, str(folder)],
                             check=True, capture_output=True, text=True)
        result[case] = json.loads(out.stdout.splitlines()[-1])["pss"]
    return result


def _timed(ds: PackedDataset, order: np.ndarray, passes: int) -> float:
    start = time.perf_counter()
    for _ in range(passes):
        for at in range(0, len(order), BATCH):
            ds.__getitems__(order[at : at + BATCH].tolist())
    return time.perf_counter() - start


def run_speed(folders: dict[str, Path], runs: int,
              passes: int = 5) -> dict[str, tuple[float, float, float]]:
    """fmt -> (samples/s from the page cache, from RAM, median of the paired ratios).

    Each run times `passes` passes from the disk folder and as many from RAM, in turns
    (which goes first alternates), so the machine's drift falls on both alike.
    """
    result = {}
    for fmt, folder in folders.items():
        disk = PackedDataset(folder, decode="raw")
        ram = PackedDataset(folder, decode="raw", in_memory=True)
        order = np.random.default_rng(0).permutation(len(disk))
        _timed(disk, order, 1), _timed(ram, order, 1)  # warm: page cache, mappings
        times: dict[str, list[float]] = {"disk": [], "ram": []}
        for run in range(runs):
            for name in ("disk", "ram") if run % 2 == 0 else ("ram", "disk"):
                times[name].append(_timed(disk if name == "disk" else ram, order, passes))
        ratios = [d / r for d, r in zip(times["disk"], times["ram"], strict=True)]
        num = len(order) * passes
        result[fmt] = (num / statistics.median(times["disk"]),
                       num / statistics.median(times["ram"]), statistics.median(ratios))
        ram.close()
    return result


def data_bytes(folder: Path) -> int:
    """The dataset's data files (for npy: the pixels, images.npy)."""
    return sum(shard.num_bytes for shard in read_index(folder).shards)


def markdown(size: int, pss: dict[str, int],
             speed: dict[str, tuple[float, float, float]]) -> str:
    lines = [f"data: {size / 2**20:.0f} MiB (the npy dataset's images.npy)", "",
             "| main + 2 workers, one epoch | PSS over an empty dataset | x data |",
             "| --- | --- | --- |"]
    for case, base in BASE.items():
        extra = pss[case] - pss[base]
        lines.append(f"| {case} | {extra / 2**20:.0f} MiB | {extra / size:.2f}x |")
    lines += ["", "| format | page cache | in RAM | RAM / page cache (paired) |",
              "| --- | --- | --- | --- |"]
    for fmt, (disk, ram, ratio) in speed.items():
        lines.append(f"| {fmt} | {disk:,.0f}/s | {ram:,.0f}/s | {ratio:.2f}x |")
    return "\n".join(lines)


def report(work: Path, count: int, side: int, runs: int, script: Path,
           formats: Sequence[str] = ("npy", "lmdb")) -> str:
    folders = pack(work, count, side)
    pss = run_pss(folders["npy"], script)
    speed = run_speed({fmt: folders[fmt] for fmt in formats}, runs)
    return markdown(data_bytes(folders["npy"]), pss, speed)
