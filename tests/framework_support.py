"""What the framework children share: the image size, keys as ints, and the record they write."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from packer.core.index import open_dataset

SIZE = (8, 8)
# How worker processes start in a multi-threaded torchrun child: on CPython < 3.12 a fork
# can hang the new process when another thread starts or ends at that moment (gloo's, a
# shut-down iterator's queue feeders), which once stopped a CI run of accelerate_child
# for its whole 300 s timeout; docs/guides/frameworks.md gives users the same advice.
WORKER_START = "fork" if sys.version_info >= (3, 12) else "forkserver"
# The fork server imports torch, the readers and the framework this process imported once,
# so each worker it forks starts in a fraction of a second; without it every DataLoader
# iterator's workers import them afresh (8 s a pass on 2 loaded cores, 13-19 s with
# Lightning imported). Import this module after the framework; a server not yet started
# takes it.
FRAMEWORKS = ("lightning", "accelerate", "transformers", "torchdata")
FORKSERVER_PRELOAD = ["torch", "readers", *(name for name in FRAMEWORKS if name in sys.modules)]
multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)


@dataclass(frozen=True)
class KeyIds:
    """A collate_fn: (image, label, key) samples -> (float images, labels, key positions).

    Positions are ints, so a batch that a framework broadcasts across ranks (Accelerate's
    dispatch) carries them; `keys_of` turns them back into keys.
    """

    keys: tuple[str, ...]

    @classmethod
    def of(cls, path: Path) -> KeyIds:
        return cls(tuple(open_dataset(path)[1].keys()))

    def __call__(self, samples: Sequence[tuple[Any, int, str]]) -> tuple[torch.Tensor, ...]:
        position = {key: i for i, key in enumerate(self.keys)}
        images = torch.stack([torch.as_tensor(image) for image, _, _ in samples]).float()
        labels = torch.tensor([label for _, label, _ in samples])
        return images, labels, torch.tensor([position[key] for _, _, key in samples])

    def keys_of(self, ids: torch.Tensor) -> list[str]:
        return [self.keys[i] for i in ids.tolist()]


def write_seen(out: Path, rank: int, epochs: list[dict[str, list[str]]]) -> None:
    """OUT/rank{r}-epoch{e}.json: {setup: the keys it trained on, in order}."""
    for epoch, seen in enumerate(epochs):
        (out / f"rank{rank}-epoch{epoch}.json").write_text(json.dumps(seen))


def end_job() -> NoReturn:
    """Ends a torchrun child once its results are written, without interpreter shutdown.

    Gloo's worker threads can still be releasing a finished collective's tensors when
    Python finalizes; the release takes the GIL, which a finalizing interpreter answers
    with pthread_exit, and the process aborts ("terminate called without an active
    exception", SIGABRT), a failed job after a finished run. torch's own account:
    pytorch/pytorch#179291. A DDP model (Accelerate's `prepare`, the Trainer) keeps gloo's
    threads alive past destroy_process_group, so only skipping finalization is sure; it
    reproduced with pure torch and no readers (docs/guides/frameworks.md).
    """
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
