"""One 2-rank Lightning DDP run (CPU, gloo) over PackedIterableDataset with 2 persistent
workers: what devtools.soak.lightning_fork runs, N times in a row.

    python -m devtools.soak.lightning_fork_child DATASET OUT [--context fork]
        [--validate] [--main-read] [--probe]

Lightning starts rank 1 by running this module again. Each rank writes OUT/rank<r>.done
with the number of batches it trained on once `fit` returns, so a run that never gets
there is told apart from one that did. --validate adds a validation loader with 2
non-persistent workers (and Lightning's sanity check, whose iterator is shut down just
before the training workers fork); --main-read reads a few batches of the dataset in the
main process first (prefetch threads, for a URL); --probe records every fork
(devtools.soak.fork_probe) into OUT/forks/.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.nn import functional
from torch.utils.data import DataLoader

from devtools.soak import fork_probe
from readers import PackedIterableDataset

BATCH = 10
SIZE = (8, 8)


def loader(path: str, context: str, persistent: bool) -> DataLoader[Any]:
    """2 workers over the dataset, dealing whole batches (batch_size= on the dataset)."""
    ds = PackedIterableDataset(path, size=SIZE, batch_size=BATCH)
    return DataLoader(ds, batch_size=BATCH, num_workers=2, persistent_workers=persistent,
                      multiprocessing_context=context)


class Model(L.LightningModule):
    """A linear classifier that counts the batches it trains on."""

    def __init__(self, path: str, context: str, validate: bool) -> None:
        super().__init__()
        self.path, self.context, self.validate = path, context, validate
        self.layer = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
        self.batches = 0

    def _loss(self, batch: Any) -> torch.Tensor:
        images, labels = batch[0], batch[1]
        logits = self.layer(images.float().flatten(1))
        return functional.cross_entropy(logits, labels.clamp(min=0))

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        self.batches += 1
        return self._loss(batch)

    def validation_step(self, batch: Any, _: int) -> None:
        self._loss(batch)

    def train_dataloader(self) -> Any:
        return loader(self.path, self.context, persistent=True)

    def val_dataloader(self) -> Any:
        return loader(self.path, self.context, persistent=False) if self.validate else []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("out", type=Path)
    parser.add_argument("--context", default="fork")
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--main-read", action="store_true")
    parser.add_argument("--probe", action="store_true")
    args = parser.parse_args()
    if args.probe:
        fork_probe.install(args.out / "forks")
    if args.main_read:  # e.g. a look at the data before training, in the main process
        ds = PackedIterableDataset(args.dataset, size=SIZE, batch_size=BATCH)
        sum(1 for _ in itertools.islice(ds, BATCH))
    model = Model(args.dataset, args.context, args.validate)
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=2 if args.validate else 0)
    trainer.fit(model)
    (args.out / f"rank{trainer.global_rank}.done").write_text(str(model.batches))


if __name__ == "__main__":
    main()
