"""A real 2-process transformers.Trainer run (torchrun, CPU, gloo), as its docs show, recorded.

    PYTHONPATH=. torchrun --nproc_per_node 2 tests/frameworks/trainer_child.py DATASET OUT

`Trainer(train_dataset=ds)` builds and prepares its own loader (with Accelerate) for each
setup, 2 epochs each, 2 workers, and the model notes the keys of every batch it trains on:

    map                PackedDataset (the Trainer's own sampler)
    iterable           PackedIterableDataset(batch_size=10): dispatch_batches defaults to True
    iterable_shards    accelerator_config={"dispatch_batches": False}
    iterable_unbatched PackedIterableDataset without batch_size=, dispatch_batches default

Each rank writes OUT/rank{r}-epoch{e}.json: {setup: keys, in order}.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional
from transformers import Trainer, TrainerCallback, TrainingArguments

from readers import PackedDataset, PackedIterableDataset
from tests.framework_support import SIZE, KeyIds, end_job, write_seen

BATCH = 10


class Probe(torch.nn.Module):
    """A linear model that notes the keys of every batch it trains on, epoch by epoch."""

    def __init__(self, collate: KeyIds) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3 * SIZE[0] * SIZE[1], 3)
        self.collate = collate
        self.epochs: list[list[str]] = [[]]

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor,
                key_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        self.epochs[-1].extend(self.collate.keys_of(key_ids))
        logits = self.layer(pixel_values.flatten(1))
        return {"loss": functional.cross_entropy(logits, labels.clamp(min=0))}


class EpochEnds(TrainerCallback):
    """Starts the probe's next epoch when the Trainer ends one."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def on_epoch_end(self, *_: Any, **__: Any) -> None:
        self.probe.epochs.append([])


def as_inputs(collate: KeyIds) -> Any:
    def collate_fn(samples: list[Any]) -> dict[str, torch.Tensor]:
        images, labels, ids = collate(samples)
        return {"pixel_values": images, "labels": labels, "key_ids": ids}
    return collate_fn


def train(dataset: Any, collate: KeyIds, out: Path,
          accelerator_config: dict[str, Any] | None = None) -> list[list[str]]:
    args = TrainingArguments(
        output_dir=str(out / "trainer"), per_device_train_batch_size=BATCH,
        num_train_epochs=2, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", dataloader_num_workers=2, disable_tqdm=True,
        accelerator_config=accelerator_config or {})
    probe = Probe(collate)
    trainer = Trainer(model=probe, args=args, train_dataset=dataset,
                      data_collator=as_inputs(collate), callbacks=[EpochEnds(probe)])
    trainer.train()
    return probe.epochs[:2]


def main() -> None:
    path, out = Path(sys.argv[1]), Path(sys.argv[2])
    collate = KeyIds.of(path)

    def iterable(**options: Any) -> PackedIterableDataset:
        return PackedIterableDataset(path, size=SIZE, with_keys=True, **options)

    runs = {
        "map": train(PackedDataset(path, size=SIZE, with_keys=True), collate, out),
        "iterable": train(iterable(batch_size=BATCH), collate, out),
        "iterable_shards": train(iterable(batch_size=BATCH), collate, out,
                                 {"dispatch_batches": False}),
        "iterable_unbatched": train(iterable(), collate, out),
    }
    seen = [{name: epochs[e] for name, epochs in runs.items()} for e in range(2)]
    write_seen(out, torch.distributed.get_rank(), seen)
    end_job()


if __name__ == "__main__":
    main()
