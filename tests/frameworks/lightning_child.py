"""A real 2-rank Lightning run (strategy="ddp", CPU, gloo) that records what each rank trains on.

    python tests/frameworks/lightning_child.py DATASET OUT inside|before

Lightning starts rank 1 by running this script again. Three loaders train side by side
(a CombinedLoader of equal lengths, so none is cycled): PackedDataset + ChunkSampler,
PackedDataset + shuffle=True (Lightning injects its DistributedSampler), and
PackedIterableDataset with two workers, dealing whole batches of its own batch_size= or,
without one, of its loader's. `inside` builds them in
`train_dataloader` (inside fit, after the process group exists), `before` at the top of
the script, before the group exists. The iterable loaders start their workers as
framework_support.WORKER_START says (a fork server on CPython < 3.12: this process has
gloo's threads). Each rank writes OUT/rank{r}-epoch{e}.json: the keys
each loader fed to training_step, in order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.nn import functional

from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from tests.framework_support import WORKER_START

BATCH = 20
SIZE = (8, 8)


def loaders(path: Path) -> dict[str, torch.utils.data.DataLoader[Any]]:
    ds = PackedDataset(path, size=SIZE, with_keys=True)
    iterable = PackedIterableDataset(path, size=SIZE, with_keys=True, batch_size=BATCH)
    return {
        "sampler": torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=ChunkSampler(ds)),
        "shuffle": torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True),
        "iterable": torch.utils.data.DataLoader(iterable, batch_size=BATCH, num_workers=2,
                                                multiprocessing_context=WORKER_START),
        "unbatched": torch.utils.data.DataLoader(
            PackedIterableDataset(path, size=SIZE, with_keys=True), batch_size=BATCH,
            num_workers=2, multiprocessing_context=WORKER_START),
    }


class Probe(L.LightningModule):
    """A linear model that notes the keys of every batch it trains on."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.layer = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
        self.seen: dict[str, list[str]] = {}

    def training_step(self, batch: dict[str, Any], _: int) -> torch.Tensor:
        loss = torch.zeros(())
        for name, (images, labels, keys) in batch.items():
            self.seen.setdefault(name, []).extend(keys)
            logits = self.layer(images.float().flatten(1))
            loss = loss + functional.cross_entropy(logits, labels.clamp(min=0))
        return loss

    def on_train_epoch_end(self) -> None:
        name = f"rank{self.global_rank}-epoch{self.current_epoch}.json"
        (self.out / name).write_text(json.dumps(self.seen))
        self.seen = {}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class BuildsInside(Probe):
    """Builds its loaders in the hook Lightning calls inside fit."""

    def __init__(self, out: Path, path: Path) -> None:
        super().__init__(out)
        self.path = path

    def train_dataloader(self) -> Any:
        return loaders(self.path)


def main() -> None:
    path, out, where = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    built = loaders(path) if where == "before" else None  # before any process group
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    if built is None:
        trainer.fit(BuildsInside(out, path))
    else:
        trainer.fit(Probe(out), train_dataloaders=built)


if __name__ == "__main__":
    main()
