"""A real 2-process Accelerate run (torchrun, CPU, gloo) with the calls its docs show, recorded.

    PYTHONPATH=. torchrun --nproc_per_node 2 tests/frameworks/accelerate_child.py DATASET OUT

Each setup trains side by side for 2 epochs and notes the keys each batch brought:

    sampler            prepare(model, optimizer, DataLoader(ds, sampler=ChunkSampler(ds)))
    shuffle            prepare(..., DataLoader(ds, shuffle=True))   (Accelerate's own sampler)
    iterable           prepare(..., DataLoader(PackedIterableDataset, num_workers=2)), workers
                       started as framework_support.WORKER_START says:
                       dispatch_batches defaults to True for an IterableDataset
    iterable_shards    the same under DataLoaderConfiguration(dispatch_batches=False)
    iterable_spawn     dispatch_batches default, spawn workers, no batch_size= on the dataset
    unprepared         a DataLoader left unprepared: the readers split it themselves

Keys travel as int positions (framework_support.KeyIds): a dispatched batch is
broadcast from rank 0, and strings do not broadcast. Each rank writes
OUT/rank{r}-epoch{e}.json: {setup: keys, in order}.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch.nn import functional
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from tests.framework_support import SIZE, WORKER_START, KeyIds, end_job, write_seen

BATCH = 10


def loaders(path: Path, collate: KeyIds) -> dict[str, DataLoader[Any]]:
    ds = PackedDataset(path, size=SIZE, with_keys=True)

    def iterable(**options: Any) -> PackedIterableDataset:
        return PackedIterableDataset(path, size=SIZE, with_keys=True, **options)

    return {
        "sampler": DataLoader(ds, batch_size=BATCH, sampler=ChunkSampler(ds), collate_fn=collate),
        "shuffle": DataLoader(ds, batch_size=BATCH, shuffle=True, collate_fn=collate),
        "iterable": DataLoader(iterable(batch_size=BATCH), batch_size=BATCH, num_workers=2,
                               multiprocessing_context=WORKER_START, collate_fn=collate),
        "iterable_shards": DataLoader(iterable(batch_size=BATCH), batch_size=BATCH,
                                      num_workers=2, multiprocessing_context=WORKER_START,
                                      collate_fn=collate),
        "iterable_spawn": DataLoader(iterable(), batch_size=BATCH, num_workers=2,
                                     multiprocessing_context="spawn", collate_fn=collate),
        "unprepared": DataLoader(iterable(), batch_size=BATCH, collate_fn=collate),
    }


def main() -> None:
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    collate = KeyIds.of(path)
    accelerator = Accelerator(cpu=True)
    shards = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        dispatch_batches=False))
    model = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    built = loaders(path, collate)
    model, optimizer, *prepared = accelerator.prepare(
        model, optimizer, built["sampler"], built["shuffle"], built["iterable"],
        built["iterable_spawn"])
    prepared += [shards.prepare(built["iterable_shards"])]
    built.update(zip(["sampler", "shuffle", "iterable", "iterable_spawn", "iterable_shards"],
                     prepared, strict=True))
    seen: list[dict[str, list[str]]] = []
    for _ in range(2):
        epoch: dict[str, list[str]] = {}
        for name, loader in built.items():
            for images, labels, ids in loader:
                loss = functional.cross_entropy(model(images.flatten(1)), labels.clamp(min=0))
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                epoch.setdefault(name, []).extend(collate.keys_of(ids))
        seen.append(epoch)
    write_seen(out, accelerator.process_index, seen)
    accelerator.end_training()
    end_job()


if __name__ == "__main__":
    main()
