"""The measurements of devtools.gpu_check: loading rate and CPU time per image, pixel
agreement with the CPU path, and the stream-hazard run.

`Target` names where decode runs: a CUDA device with the decoder readers.decode_on
chooses, or (for a run of the check on a machine without one) the CPU with a stand-in
decoder through the same device code path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import simplejpeg
import torch
from torch.utils.data import DataLoader

from readers import PackedDataset, RandomResizedCrop, RawBatch, collate, decode_on
from readers.augment import Augment
from readers.decoding._cuda_decode import decode_cuda
from readers.decoding.device_decode import crop_wheres
from readers.decoding.gpu_decoders import Decoder


def _stand_in(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """libjpeg-turbo's full decode, planar, on `device`: the GPU decoder's stand-in."""
    return [torch.from_numpy(simplejpeg.decode_jpeg(bytes(t.numpy()), colorspace="RGB"))
            .permute(2, 0, 1).to(device) for t in data]


@dataclass(frozen=True)
class Target:
    device: torch.device
    decoder: Decoder | None  # None: the one decode_on chooses

    @classmethod
    def of(cls, device: str) -> Target:
        target = torch.device(device)
        stand_in = None if target.type == "cuda" else Decoder("stand-in (libjpeg-turbo)", _stand_in)
        return cls(target, stand_in)

    def decode(self, raw: RawBatch, seed: int = 0, **options: Any) -> torch.Tensor:
        """The device path's images of a raw batch: decode_on, or its code with the stand-in."""
        if self.decoder is None:
            return decode_on(raw, self.device, seed=seed, **options)
        augment: Augment | None = options.get("augment")
        crops = crop_wheres(raw, augment, seed, 0, None)
        return decode_cuda(raw, self.device, options.get("size"), augment, crops, self.decoder)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@dataclass(frozen=True)
class Rate:
    images_per_s: float
    cpu_ms_per_image: float  # the main process and its DataLoader workers together

    @property
    def images_per_cpu_s(self) -> float:
        return 1000 / max(self.cpu_ms_per_image, 1e-9)


def _cpu_seconds(process: psutil.Process) -> float:
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # a worker that ended between the listing and the read
            continue
        total += times.user + times.system
    return total


def _endless(loader: DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def rate(loader: DataLoader[Any], step: Callable[[Any], int], batches: int,
         target: Target, warmup: int = 3) -> Rate:
    """Images a second and CPU milliseconds an image over `batches` batches after
    `warmup` (persistent workers, so their CPU time is read while they run)."""
    process = psutil.Process()
    stream = _endless(loader)
    for _ in range(warmup):
        step(next(stream))
    target.sync()
    cpu, start, done = _cpu_seconds(process), time.perf_counter(), 0
    for _ in range(batches):
        done += step(next(stream))
    target.sync()
    wall = time.perf_counter() - start
    used = _cpu_seconds(process) - cpu
    return Rate(done / max(wall, 1e-9), 1000 * used / max(done, 1))


def loading_rates(path: Path, target: Target, workers: int, batch: int, batches: int,
                  side: int) -> dict[str, Rate]:
    """RandomResizedCrop(side) batches on the device: CPU decode in the workers then a
    copy, against raw batches decoded on the device."""
    crop = RandomResizedCrop(side)
    common: dict[str, Any] = {"batch_size": batch, "num_workers": workers, "collate_fn": collate,
                              "persistent_workers": workers > 0,
                              "pin_memory": target.device.type == "cuda", "shuffle": True}
    cpu = DataLoader(PackedDataset(path, augment=crop, seed=1), **common)
    raw = DataLoader(PackedDataset(path, decode="raw"), **common)

    def on_cpu(pair: Any) -> int:
        pair[0].to(target.device, non_blocking=True)
        return len(pair[1])

    def on_device(pair: Any) -> int:
        target.decode(pair[0], seed=1, augment=crop)
        return len(pair[1])

    return {"CPU decode in workers, copied": rate(cpu, on_cpu, batches, target),
            "raw batches, decode_on": rate(raw, on_device, batches, target)}


@dataclass(frozen=True)
class Agreement:
    images: int
    mean: float  # mean |device - CPU| over every pixel, in levels
    worst_image: float  # the largest per-image mean
    max_pixel: int


def agreement(path: Path, target: Target, options: dict[str, Any], batch: int,
              batches: int) -> Agreement:
    """The device path against the CPU readers on the same samples, crops and seed."""
    loader = DataLoader(PackedDataset(path, decode="raw"), batch_size=batch,
                        collate_fn=collate, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    means: list[float] = []
    top = 0
    for k, (raw, _) in enumerate(loader):
        if k == batches:
            break
        got = target.decode(raw, seed=1, **options).cpu().int()
        want = decode_on(raw, "cpu", seed=1, **options).int()
        diff = (got - want).abs()
        means += diff.float().mean(dim=(1, 2, 3)).tolist()
        top = max(top, int(diff.max()))
    return Agreement(len(means), float(np.mean(means)), max(means), top)


def hazard(path: Path, target: Target, batch: int, batches: int, side: int) -> int:
    """Batches whose decode differs from the same batch decoded after a synchronize, when
    every decode is issued while slow kernels queued on the caller's stream still write
    image-sized blocks that were freed (the caching allocator hands them out again at
    once, to whatever is allocated on that stream next)."""
    loader = DataLoader(PackedDataset(path, decode="raw"), batch_size=batch,
                        collate_fn=collate)
    crop = RandomResizedCrop(side)
    differing = 0
    for k, (raw, _) in enumerate(loader):
        if k == batches:
            break
        target.sync()
        synced = target.decode(raw, seed=1, augment=crop).cpu()
        _queue_late_writes(target.device, batch)
        racing = target.decode(raw, seed=1, augment=crop)
        differing += int(not torch.equal(racing.cpu(), synced))
    return differing


def _queue_late_writes(device: torch.device, count: int) -> None:
    """Slow work, then writes into `count` blocks of a photo's decoded size, freed at once."""
    if device.type != "cuda":
        return
    slow = torch.rand((4096, 4096), device=device)
    for _ in range(8):
        slow = (slow @ slow).clamp_(0, 1)
    late = slow[0, 0].to(torch.uint8)  # ready only after the products
    blocks = [torch.empty((3, 500, 600), dtype=torch.uint8, device=device)
              for _ in range(count)]
    for block in blocks:
        block.copy_(late.expand(3, 500, 600))
    del blocks, slow, late


def unguarded(decoder: Decoder) -> Decoder:
    """The decoder run on the caller's stream (the guard of gpu_decoders.run undone): the
    hazard run's negative control, which shows whether the hazard is real for it."""
    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        if device.type != "cuda":
            return decoder.decode(data, device)
        with torch.cuda.stream(torch.cuda.default_stream(device)):
            return decoder.decode(data, device)

    return Decoder(f"{decoder.name} without the side stream", decode)
