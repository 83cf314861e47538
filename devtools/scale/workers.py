"""Worker memory over epochs on a large dataset (the memory-at-scale test and soak).

Per-sample metadata is numpy, memory-mapped and shared, so a worker's unique memory
(USS) must not grow with the epochs it serves; what it holds beyond that is the
bounded chunk cache. The loop runs in a child process, so the test runner's own
objects are not counted, and reports the workers' USS after every epoch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LOOP = """
import gc, json, sys, time
import psutil
from torch.utils.data import DataLoader
from readers import ChunkSampler, PackedDataset, PackedIterableDataset

path, kind, epochs, workers, batch, cache = sys.argv[1:7]
if kind == "map":
    dataset = PackedDataset(path, max_cache_bytes=int(cache))
    sampler = ChunkSampler(dataset)
    loader = DataLoader(dataset, batch_size=int(batch), sampler=sampler,
                        num_workers=int(workers), persistent_workers=True,
                        multiprocessing_context="fork")
else:
    dataset = sampler = PackedIterableDataset(path)
    loader = DataLoader(dataset, batch_size=int(batch), num_workers=int(workers),
                        persistent_workers=True, multiprocessing_context="fork")
gc.collect()
gc.freeze()  # forked workers then do not copy the parent's objects when they collect
uss, seconds = [], []
for epoch in range(int(epochs)):
    sampler.set_epoch(epoch)
    start = time.perf_counter()
    count = sum(len(labels) for _, labels in loader)
    seconds.append(time.perf_counter() - start)
    uss.append([child.memory_full_info().uss for child in psutil.Process().children()])
print(json.dumps({"samples_per_epoch": count, "seconds": seconds, "worker_uss": uss}))
"""


def worker_uss_by_epoch(folder: Path, epochs: int = 3, kind: str = "map", workers: int = 2,
                        batch_size: int = 1024, cache_bytes: int = 8 << 20,
                        timeout: float | None = None) -> dict[str, list[float] | int]:
    """Run `epochs` epochs with persistent workers; per epoch: seconds and each worker's USS."""
    done = subprocess.run(
        [sys.executable, "-c", LOOP, str(folder), kind, str(epochs), str(workers),
         str(batch_size), str(cache_bytes)],
        capture_output=True, text=True, check=True, timeout=timeout)
    result: dict[str, list[float] | int] = json.loads(done.stdout.splitlines()[-1])
    return result


def growth(uss_by_epoch: list[list[int]]) -> float:
    """Relative growth of the workers' total USS from the first epoch to the last."""
    first, last = sum(uss_by_epoch[0]), sum(uss_by_epoch[-1])
    return (last - first) / first
