"""A 2-process transformers.Trainer run (torchrun, CPU, gloo) that stops mid-epoch after a
step checkpoint, or resumes from one with `trainer.train(resume_from_checkpoint=...)`.

    torchrun --nproc_per_node 2 tests/resume/trainer_resume_child.py DATASET OUT stop|resume [CKPT]

from the clone's root with PYTHONPATH=. (it imports tests.framework_support).

Setups, one after the other, each in OUT/SETUP (2 workers, 2 epochs):

    map              PackedDataset, the Trainer's sampler a ChunkSampler (_get_train_sampler)
    iterable         PackedIterableDataset(batch_size=BATCH): dispatch_batches default
    iterable_shards  the same with accelerator_config={"dispatch_batches": False}

The iterable setups resume with the frameworks guide's Trainer subclass, whose
`get_resumed_dataloader` (transformers 5.25 or newer) is readers.skip_first_batches; an
older Trainer calls Accelerate's skip_first_batches, which reads the skipped batches.

`stop` saves a checkpoint every SAVE_EVERY steps and stops with an error after STOP_AFTER;
it writes OUT/SETUP/stop-rank{r}.json: the keys of its first SAVE_EVERY steps. `resume`
resumes from SETUP/CKPT and writes OUT/SETUP/resume-rank{r}-epoch{e}.json for each epoch:
the keys trained on and how many samples this rank decoded in it (OUT/SETUP/decodes-rank{r}
counts them, one byte per sample, from the workers).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from transformers import (
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from readers import ChunkSampler, PackedDataset, PackedIterableDataset, skip_first_batches
from tests.framework_support import SIZE, KeyIds, end_job

BATCH, SAVE_EVERY, STOP_AFTER = 4, 3, 5
SETUPS = ("map", "iterable", "iterable_shards")


class Stopped(Exception):
    """The stop run's crash, after the checkpoint it resumes from."""


class Decodes:
    """A transform that counts the samples decoded, one byte each in a file per rank."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / f"decodes-rank{os.environ['RANK']}"

    def __call__(self, image: Any) -> Any:
        with self.file.open("ab") as counts:
            counts.write(b"x")
        return image

    def take(self) -> int:
        """The count so far, restarted."""
        count = self.file.stat().st_size if self.file.exists() else 0
        self.file.write_bytes(b"")
        return count


class ChunkTrainer(Trainer):
    """The Trainer with a ChunkSampler as its training sampler."""

    def _get_train_sampler(self, train_dataset: Any = None) -> ChunkSampler:
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        assert isinstance(dataset, PackedDataset)
        return ChunkSampler(dataset)


class ReaderTrainer(Trainer):
    """The Trainer resuming an iterable reader at its position (the frameworks guide)."""

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        return skip_first_batches(dataloader, num_batches)


class Probe(torch.nn.Module):
    """A linear model that notes the keys of every batch it trains on."""

    def __init__(self, collate: KeyIds) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
        self.collate = collate
        self.steps: list[list[str]] = []

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor,
                key_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        self.steps.append(self.collate.keys_of(key_ids))
        logits = self.layer(pixel_values.flatten(1))
        return {"loss": functional.cross_entropy(logits, labels.clamp(min=0))}


class Record(TrainerCallback):
    """Writes each epoch's keys and decode count (resume), or stops the run (stop)."""

    def __init__(self, probe: Probe, decodes: Decodes, out: Path, stop: bool) -> None:
        self.probe, self.decodes, self.out, self.stop = probe, decodes, out, stop
        self.epochs = 0

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        if self.stop and state.global_step == STOP_AFTER:
            raise Stopped

    def on_epoch_end(self, *_: Any, **__: Any) -> None:
        rank = os.environ["RANK"]
        seen = {"keys": [key for step in self.probe.steps for key in step],
                "decodes": self.decodes.take()}
        (self.out / f"resume-rank{rank}-epoch{self.epochs}.json").write_text(json.dumps(seen))
        self.probe.steps, self.epochs = [], self.epochs + 1


def train(path: Path, out: Path, setup: str, checkpoint: str | None) -> None:
    collate = KeyIds.of(path)
    decodes = Decodes(out)
    decodes.take()
    data: Any = PackedDataset(path, size=SIZE, with_keys=True, transform=decodes)
    if setup != "map":
        data = PackedIterableDataset(path, size=SIZE, with_keys=True, batch_size=BATCH,
                                     transform=decodes)
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=BATCH, num_train_epochs=2,
        use_cpu=True, report_to=[], save_strategy="steps", save_steps=SAVE_EVERY,
        logging_strategy="no", dataloader_num_workers=2, disable_tqdm=True, seed=0,
        accelerator_config={"dispatch_batches": False} if setup == "iterable_shards" else {})
    probe = Probe(collate)

    def inputs(samples: list[Any]) -> dict[str, torch.Tensor]:
        images, labels, ids = collate(samples)
        return {"pixel_values": images, "labels": labels, "key_ids": ids}

    kind = ChunkTrainer if setup == "map" else ReaderTrainer
    trainer = kind(model=probe, args=args, train_dataset=data, data_collator=inputs,
                   callbacks=[Record(probe, decodes, out, stop=checkpoint is None)])
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except Stopped:
        before = [key for step in probe.steps[:SAVE_EVERY] for key in step]
        (out / f"stop-rank{os.environ['RANK']}.json").write_text(json.dumps(before))


def main() -> None:
    path, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    for setup in SETUPS:
        folder = out / setup
        folder.mkdir(exist_ok=True)
        train(path, folder, setup, str(folder / sys.argv[4]) if mode == "resume" else None)
    end_job()


if __name__ == "__main__":
    main()
