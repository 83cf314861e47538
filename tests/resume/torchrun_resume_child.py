"""A torchrun job (gloo, CPU) that stops mid-epoch and saves its state, or resumes from one.

    CHILD=tests/resume/torchrun_resume_child.py
    torchrun --nproc_per_node N $CHILD DATASET OUT stop WORKERS
    torchrun --nproc_per_node N $CHILD DATASET OUT resume WORKERS STATES

Three setups, each as a user saves its state:

    sampler     PackedDataset + ChunkSampler, plain DataLoader: loop_state(...)
    iterable    PackedIterableDataset, plain DataLoader: loop_state(...)
    stateful    PackedIterableDataset, torchdata StatefulDataLoader: loader.state_dict()

`stop` reads the first STOP batches of EPOCH on every rank and rank 0 saves each setup's
state to OUT/state-{setup}.pt; `resume` loads STATES/state-{setup}.pt into the reader
(rank, world size and worker count from this job) and reads the rest of the epoch. Each
rank writes OUT/{stop|resume}-rank{r}.json: {setup: {"keys": real keys, "padded": flagged
repeats, "batches": batches read}}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions, loop_state
from readers.sampling.sampler import PAD_LABEL
from tests.framework_support import WORKER_START

EPOCH, BATCH, STOP = 1, 4, 3
SPLIT = PartitionOptions(chunk_size=4, buffer_size=8, drop_last=False)


def reader(path: Path, setup: str) -> tuple[Any, Any, dict[str, Any]]:
    """(dataset, what holds the order, DataLoader keywords) of a setup."""
    if setup == "sampler":
        ds = PackedDataset(path, decode="raw", with_keys=True)
        sampler = ChunkSampler(ds, partition=SPLIT)
        return ds, sampler, {"sampler": sampler}
    it = PackedIterableDataset(path, decode="raw", with_keys=True, partition=SPLIT)
    return it, it, {}


def loader(setup: str, data: Any, workers: int, options: dict[str, Any]) -> Any:
    kind: Any = DataLoader
    if setup == "stateful":
        from torchdata.stateful_dataloader import (  # type: ignore[import-untyped]
            StatefulDataLoader,
        )
        kind = StatefulDataLoader
    start = {"multiprocessing_context": WORKER_START} if workers else {}  # gloo has threads
    return kind(data, batch_size=BATCH, num_workers=workers, **start, **options)


def record(batches: list[Any]) -> dict[str, Any]:
    keys: list[str] = []
    padded: list[str] = []
    for _, labels, names in batches:
        for key, label in zip(names, labels.tolist(), strict=True):
            (padded if label == PAD_LABEL else keys).append(key)
    return {"keys": keys, "padded": padded, "batches": len(batches)}


def stop(path: Path, setup: str, workers: int, out: Path) -> dict[str, Any]:
    data, order, options = reader(path, setup)
    order.set_epoch(EPOCH)
    running = loader(setup, data, workers, options)
    batches = iter(running)
    seen = [next(batches) for _ in range(STOP)]
    # a loop_state's world size is the process group's
    state = running.state_dict() if setup == "stateful" else loop_state(EPOCH, STOP, BATCH,
                                                                          workers)
    if dist.get_rank() == 0:
        torch.save(state, out / f"state-{setup}.pt")
    del batches
    return record(seen)


def resume(path: Path, setup: str, workers: int, states: Path) -> dict[str, Any]:
    data, order, options = reader(path, setup)
    order.load_state_dict(torch.load(states / f"state-{setup}.pt"))
    return record(list(loader("plain", data, workers, options)))


def main() -> None:
    path, out, mode, workers = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("gloo")
    try:
        if mode == "stop":
            seen = {setup: stop(path, setup, workers, out)
                    for setup in ("sampler", "iterable", "stateful")}
        else:
            seen = {setup: resume(path, setup, workers, Path(sys.argv[5]))
                    for setup in ("sampler", "iterable", "stateful")}
        (out / f"{mode}-rank{dist.get_rank()}.json").write_text(json.dumps(seen))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
