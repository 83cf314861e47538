"""`pack profile`: where the time per sample goes, and what to change.

Stages are timed one by one in this process over the same samples: read (I/O), decode
(to full size), resize (antialiased, to the training size), collate (into batches).
Then the same samples go through a DataLoader with workers, and the main process's
wait per batch is measured with LoaderMonitor. The largest stage is the bottleneck.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, default_collate

from packer import formats
from packer.core.index import INDEX_NAME, open_dataset
from packer.source.scan import scan
from packer.storage.files import read_input
from readers.decoding.decode import decode
from readers.diagnostics.monitor import LoaderMonitor
from readers.diagnostics.sweep import open_for_bench

ADVICE = {
    "read": "put the data on faster storage, or pack it (wds/lmdb/hdf5 read far fewer files)",
    "decode": "try `--size` at pack time or the npy format (no decode at train time)",
    "resize": "pack at the training size (`pack convert --size HxW`) so no resize is left",
    "collate": "use a larger batch or fewer tensors per sample",
}


@dataclass(frozen=True)
class Profile:
    """Seconds per sample for each stage, and the loader's figures with workers."""

    per_sample_s: dict[str, float]
    samples: int
    workers: int
    loader_images_per_s: float
    loader_wait_s: float

    @property
    def shares(self) -> dict[str, float]:
        total = sum(self.per_sample_s.values()) or 1.0
        return {stage: t / total for stage, t in self.per_sample_s.items()}

    def bottleneck(self) -> str:
        stage, share = max(self.shares.items(), key=lambda kv: kv[1])
        return f"{stage}: {share:.0%} of the time; {ADVICE[stage]}"


def read_stored(path: Path, indices: list[int]) -> tuple[list[bytes], float,
                                                         tuple[int, int] | None]:
    """Stored bytes of the samples, seconds per sample, and the pixel shape for npy.

    The reader is closed afterwards: LMDB refuses a second open of the same
    environment in one process, which forked DataLoader workers would inherit.
    """
    if not (path / INDEX_NAME).exists():
        items = scan(path).items
        data, seconds = timed(lambda i: read_input(items[i].path), indices)
        return data, seconds, None
    index, table = open_dataset(path)
    reader = formats.load(index.format).open_reader(path, index, table)
    try:
        data, seconds = timed(reader.read, indices)
    finally:
        reader.close()
    return data, seconds, index.image_size


def count_samples(path: Path) -> int:
    if (path / INDEX_NAME).exists():
        return open_dataset(path)[0].num_samples
    return len(scan(path).items)


def timed(func: Callable[[Any], Any], inputs: Sequence[Any]) -> tuple[list[Any], float]:
    """Outputs and mean seconds per input; one untimed call first pays one-off warm-up."""
    if inputs:
        func(inputs[0])
    start = time.perf_counter()
    outputs = [func(x) for x in inputs]
    return outputs, (time.perf_counter() - start) / max(1, len(inputs))


def profile(path: Path, num_samples: int = 256, size: int = 224, workers: int = 2,
            batch_size: int = 64) -> Profile:
    """Time each stage over the first `num_samples` samples, then a real loader."""
    indices = list(range(min(num_samples, count_samples(path))))
    stages: dict[str, float] = {}
    data, stages["read"], pixels = read_stored(path, indices)
    images, stages["decode"] = timed(lambda d: decode(d, "rgb8", None, pixels_shape=pixels), data)
    resized, stages["resize"] = timed(lambda t: resize(t, size), images)
    batches = [[(img, 0) for img in resized[i : i + batch_size]]
               for i in range(0, len(resized), batch_size)]
    _, per_batch = timed(default_collate, batches)
    stages["collate"] = per_batch * len(batches) / max(1, len(resized))
    rate, wait = loader_figures(path, indices, size, workers, batch_size)
    return Profile(stages, len(indices), workers, rate, wait)


def resize(image: Any, size: int) -> torch.Tensor:
    batch = image.unsqueeze(0)
    return F.interpolate(batch, size=(size, size), mode="bilinear", antialias=True)[0]


def loader_figures(path: Path, indices: list[int], size: int, workers: int,
                   batch_size: int) -> tuple[float, float]:
    """images/s and mean wait per batch of a DataLoader with workers over the same samples."""
    dataset = Subset(open_for_bench(path, size), indices)
    monitor = LoaderMonitor(DataLoader(dataset, batch_size=batch_size, num_workers=workers))
    for _ in monitor:
        pass
    stats = monitor.stats()
    return stats["images_per_s"], stats["mean_wait_s"]
