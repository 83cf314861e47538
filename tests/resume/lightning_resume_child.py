"""A Lightning run that stops mid-epoch after a step checkpoint, or resumes from one.

    python tests/resume/lightning_resume_child.py DATASET OUT stop SETUP DEVICES
    python tests/resume/lightning_resume_child.py DATASET OUT resume SETUP DEVICES CKPT

SETUP is a torchdata StatefulDataLoader (the loader Lightning saves and restores the
position of) over PackedDataset + ChunkSampler (`sampler`) or PackedIterableDataset
(`iterable`), 2 workers. `stop` trains with ModelCheckpoint(every_n_train_steps=SAVE_EVERY)
and stops with an error after STOP_AFTER steps, past that checkpoint; `resume` runs
`trainer.fit(model, ckpt_path=CKPT)` in this new process to the end of 2 epochs.
`plain_epoch` reads an epoch of a setup with a plain DataLoader, to compare orders. The
workers start as framework_support.WORKER_START says (a fork server on CPython < 3.12:
Lightning's process has threads). Every
training step appends {"epoch", "batch", "keys", "padded"} to OUT/{stop|resume}-rank{r}.jsonl
(DEVICES 2: strategy="ddp", Lightning starting rank 1 by running this script again).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.nn import functional
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, PartitionOptions
from readers.sampling.sampler import PAD_LABEL
from tests.framework_support import WORKER_START  # the clone's root is on PYTHONPATH

BATCH, SAVE_EVERY, STOP_AFTER = 4, 3, 5
SIZE = (8, 8)
SPLIT = PartitionOptions(chunk_size=4, buffer_size=8, drop_last=False)


class Stopped(Exception):
    """The stop run's crash, after the checkpoint it resumes from."""


def loader(path: Path, setup: str, kind: Any = StatefulDataLoader,
           epoch: int | None = None) -> Any:
    """The setup's loader; `epoch`: named with set_epoch (Lightning names it itself)."""
    if setup == "sampler":
        ds = PackedDataset(path, size=SIZE, with_keys=True)
        sampler = ChunkSampler(ds, partition=SPLIT)
        if epoch is not None:
            sampler.set_epoch(epoch)
        return kind(ds, batch_size=BATCH, sampler=sampler, num_workers=2,
                    multiprocessing_context=WORKER_START)
    it = PackedIterableDataset(path, size=SIZE, with_keys=True, partition=SPLIT)
    if epoch is not None:
        it.set_epoch(epoch)
    return kind(it, batch_size=BATCH, num_workers=2, multiprocessing_context=WORKER_START)


def plain_epoch(path: Path, setup: str, epoch: int) -> list[str]:
    """The real keys of the setup's epoch read by a plain DataLoader, in order."""
    return [key for _, labels, keys in loader(path, setup, DataLoader, epoch)
            for key, label in zip(keys, labels.tolist(), strict=True) if label != PAD_LABEL]


class Probe(L.LightningModule):
    """A linear model that appends the keys of every batch it trains on to `steps_file`."""

    def __init__(self, steps_file: Path, stop: bool) -> None:
        super().__init__()
        self.steps_file, self.stop = steps_file, stop
        self.layer = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels, keys = batch
        padded = [key for key, label in zip(keys, labels.tolist(), strict=True)
                  if label == PAD_LABEL]
        line = {"epoch": self.current_epoch, "batch": batch_idx,
                "keys": [k for k in keys if k not in padded], "padded": padded}
        with self.steps_file.with_name(f"{self.steps_file.stem}-rank{self.global_rank}.jsonl"
                                       ).open("a") as log:
            log.write(json.dumps(line) + "\n")
        logits = self.layer(images.float().flatten(1))
        return functional.cross_entropy(logits, labels.clamp(min=0))

    def on_train_batch_end(self, *_: Any) -> None:
        if self.stop and self.global_step == STOP_AFTER:
            raise Stopped

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    path, out, mode, setup = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    checkpoints = ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=SAVE_EVERY,
                                  save_top_k=-1, filename="{step}")
    devices = int(sys.argv[5])
    trainer = L.Trainer(accelerator="cpu", devices=devices, max_epochs=2, logger=False,
                        strategy="ddp" if devices > 1 else "auto",
                        callbacks=[checkpoints], enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0)
    model = Probe(out / f"{mode}.jsonl", stop=mode == "stop")
    with contextlib.suppress(Stopped):
        trainer.fit(model, train_dataloaders=loader(path, setup),
                    ckpt_path=sys.argv[6] if mode == "resume" else None)


if __name__ == "__main__":
    main()
