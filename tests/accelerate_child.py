"""A real 2-process Accelerate run (torchrun, CPU, gloo): the README's recipe, recorded.

    torchrun --nproc_per_node 2 tests/accelerate_child.py DATASET OUT

`accelerator.prepare` re-splits any DataLoader it is given across processes (its
BatchSamplerShard keeps every N-th batch, its IterableDatasetShard every N-th slice of
a stream it expects to be the same on every process), and our readers have split it
already. The recipe: prepare the model and optimizer, not the loader; the loader splits
by rank itself and the batches move to `accelerator.device`. Each rank writes
OUT/rank{r}-epoch{e}.json with the keys each loader gave it, in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch.nn import functional
from torch.utils.data import DataLoader

from readers import ChunkSampler, PackedDataset, PackedIterableDataset

BATCH = 20
SIZE = (8, 8)


def loaders(path: Path) -> dict[str, DataLoader[Any]]:
    ds = PackedDataset(path, size=SIZE, with_keys=True)
    iterable = PackedIterableDataset(path, size=SIZE, with_keys=True, batch_size=BATCH)
    return {
        "sampler": DataLoader(ds, batch_size=BATCH, sampler=ChunkSampler(ds)),
        "iterable": DataLoader(iterable, batch_size=BATCH, num_workers=2,
                               multiprocessing_context="fork"),
    }


def main() -> None:
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    built = loaders(path)
    for epoch in range(2):
        seen: dict[str, list[str]] = {}
        for name, loader in built.items():
            for images, labels, keys in loader:
                logits = model(images.to(accelerator.device).float().flatten(1))
                loss = functional.cross_entropy(logits, labels.to(accelerator.device))
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                seen.setdefault(name, []).extend(keys)
        name = f"rank{accelerator.process_index}-epoch{epoch}.json"
        (out / name).write_text(json.dumps(seen))
    accelerator.end_training()


if __name__ == "__main__":
    main()
