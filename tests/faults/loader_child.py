"""A training loop run as a child process by the resource tests.

    python -m tests.faults.loader_child DATASET --kind map|iterable --workers N --epochs N
        [--sleep S] [--context fork|spawn]

Prints "started" after the first batch and "epoch E samples N fds F" after each epoch
(F: open file descriptors of this process and its workers), so the parent can signal
it mid-epoch, count what it read (under `ulimit -n`, say) or watch the descriptors.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions


def open_files() -> int:
    """Descriptors held open in this process and its children (the persistent workers).

    The fewest seen over half a second: a batch's shared-memory tensors cross the worker
    queue as descriptors that the worker's resource-sharer thread hands over and closes
    after the main process has the batch, so a count taken at that moment on a loaded
    machine sees a few in flight (81 vs 84 once in a CI run). A leak stays in every count.
    """
    me = psutil.Process()
    counts = []
    for _ in range(10):
        counts.append(me.num_fds() + sum(child.num_fds() for child in me.children()))
        time.sleep(0.05)
    return min(counts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    parser.add_argument("--kind", choices=["map", "iterable"], default="map")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--context", default="fork")
    args = parser.parse_args()
    if args.kind == "map":
        dataset: PackedDataset | PackedIterableDataset = PackedDataset(args.path, size=(8, 8),
                                                                       chunk_size=4)
        sampler = ChunkSampler(dataset, partition=PartitionOptions(drop_last=False))
        loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=args.workers,
                            persistent_workers=True, multiprocessing_context=args.context)
    else:
        dataset = PackedIterableDataset(args.path, size=(8, 8),
                                        partition=PartitionOptions(chunk_size=4, drop_last=False))
        loader = DataLoader(dataset, batch_size=4, num_workers=args.workers,
                            persistent_workers=True, multiprocessing_context=args.context)
    started = False
    for epoch in range(args.epochs):
        (sampler if args.kind == "map" else dataset).set_epoch(epoch)  # type: ignore[union-attr]
        count = 0
        for images, _ in loader:
            count += len(images)
            if not started:
                print("started", flush=True)
                started = True
            time.sleep(args.sleep)
        print(f"epoch {epoch} samples {count} fds {open_files()}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
