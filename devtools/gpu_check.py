"""One-command GPU check of readers.decode_on: throughput against the CPU path, pixel
agreement, pinned host-to-device copy rate.

    python -m devtools.gpu_check [--src PHOTOS] [--count 2048] [--batch 128]
                                 [--workers 4] [--size 224] [--work /tmp/gpu-check]

--src: an image folder (class sub-folders), e.g. from
`python -m devtools.bench.photos OUT --count 2048`; without it generated images
are used. The folder is packed as wds once under --work. Exits 2 with a message where
no CUDA device exists, 1 where the GPU's pixels disagree with the CPU path's beyond
MAX_MEAN_DIFF levels, else 0, after printing a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

MAX_MEAN_DIFF = 3.0  # mean |GPU - CPU| in uint8 levels: decoders and DCT scaling differ
COPY_BYTES = 256 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=None, help="image folder to pack")
    parser.add_argument("--count", type=int, default=2048, help="generated images")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--size", type=int, default=224, help="crop / resize side")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-check"))
    return parser.parse_args(argv)


def packed(args: argparse.Namespace) -> Path:
    """The wds dataset under --work, packed from --src or generated images."""
    from packer import ConvertOptions, convert
    from packer.testing import make_sample_folder

    dst: Path = args.work / "wds"
    if (dst / "index.json").exists():
        return dst
    src: Path = args.src or make_sample_folder(args.work / "src", count=args.count, classes=10,
                                         min_side=256, max_side=640)
    convert(src, dst, "wds", run=ConvertOptions(workers=0))
    return dst


def rate(loader: Iterable[Any], step: Callable[[Any], int]) -> float:
    """Samples a second over the loader, the clock started at its first batch."""
    done, start = 0, 0.0
    for k, batch in enumerate(loader):
        if k == 0:
            step(batch)
            torch.cuda.synchronize()
            start = time.perf_counter()
            continue
        done += step(batch)
    torch.cuda.synchronize()
    return done / max(time.perf_counter() - start, 1e-9)


def throughputs(path: Path, args: argparse.Namespace) -> dict[str, float]:
    from readers import PackedDataset, RandomResizedCrop, collate, decode_on

    crop = RandomResizedCrop(args.size)
    common = {"batch_size": args.batch, "num_workers": args.workers, "collate_fn": collate,
              "persistent_workers": args.workers > 0, "pin_memory": True}
    cpu = DataLoader(PackedDataset(path, augment=crop, seed=1), **common)
    gpu = DataLoader(PackedDataset(path, decode="raw"), **common)

    def on_cpu(batch: Any) -> int:
        batch[0].to("cuda", non_blocking=True)
        return len(batch[1])

    def on_gpu(batch: Any) -> int:
        decode_on(batch[0], "cuda", augment=crop, seed=1)
        return len(batch[1])

    out: dict[str, list[float]] = {"CPU decode (workers), to GPU": [], "GPU decode_on": []}
    for _ in range(3):  # interleaved runs, medians
        out["CPU decode (workers), to GPU"].append(rate(cpu, on_cpu))
        out["GPU decode_on"].append(rate(gpu, on_gpu))
    return {name: statistics.median(values) for name, values in out.items()}


def agreement(path: Path, args: argparse.Namespace) -> dict[str, tuple[float, int]]:
    """(mean, max) |GPU - CPU| in levels over a few batches, for size= and augment=."""
    from readers import CenterCrop, PackedDataset, RandomResizedCrop, collate, decode_on

    loader = DataLoader(PackedDataset(path, decode="raw"), batch_size=args.batch,
                        collate_fn=collate, shuffle=True)
    cases: dict[str, dict[str, Any]] = {
        f"size=({args.size}, {args.size})": {"size": (args.size, args.size)},
        f"RandomResizedCrop({args.size})": {"augment": RandomResizedCrop(args.size)},
        f"CenterCrop({args.size}, resize={args.size * 8 // 7})":
            {"augment": CenterCrop(args.size, resize=args.size * 8 // 7)}}
    out: dict[str, tuple[float, int]] = {}
    for name, options in cases.items():
        diffs = []
        for k, (raw, _) in enumerate(loader):
            if k == 3:
                break
            gpu = decode_on(raw, "cuda", seed=1, **options).cpu().numpy().astype(np.int16)
            cpu = decode_on(raw, "cpu", seed=1, **options).numpy().astype(np.int16)
            diffs.append(np.abs(gpu - cpu))
        every = np.concatenate([d.ravel() for d in diffs])
        out[name] = (float(every.mean()), int(every.max()))
    return out


def copy_rates() -> dict[str, float]:
    """GB/s host to device: pinned, pageable, and a RawBatch's pin_memory().to()."""
    from readers import RawBatch

    host = torch.empty(COPY_BYTES, dtype=torch.uint8)
    pinned = host.pin_memory()
    raw = RawBatch.of([bytes(64 << 10)] * 256)
    cases: dict[str, Callable[[], object]] = {
        "pinned tensor": lambda: pinned.to("cuda", non_blocking=True),
        "pageable tensor": lambda: host.to("cuda"),
        "RawBatch pin_memory + to": lambda: raw.pin_memory().to("cuda", non_blocking=True)}
    sizes = {"pinned tensor": COPY_BYTES, "pageable tensor": COPY_BYTES,
             "RawBatch pin_memory + to": raw.buffer.numel()}
    out = {}
    for name, copy in cases.items():
        copy()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(5):
            copy()
        torch.cuda.synchronize()
        out[name] = 5 * sizes[name] / (time.perf_counter() - start) / 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run "
              "it on a machine with an NVIDIA GPU and a CUDA build of torch", file=sys.stderr)
        return 2
    args = parse_args(argv)
    from readers.decoding._cuda_decode import best_decoder

    path = packed(args)
    print(f"# decode_on on {torch.cuda.get_device_name()}: decoder "
          f"{best_decoder().__module__}.{best_decoder().__qualname__}\n")
    print("| path | images/s |\n| --- | ---: |")
    for name, value in throughputs(path, args).items():
        print(f"| {name} | {value:,.0f} |")
    print("\n| pixels, GPU vs CPU path | mean levels | max levels |\n| --- | ---: | ---: |")
    worst = 0.0
    for name, (mean, top) in agreement(path, args).items():
        print(f"| {name} | {mean:.2f} | {top} |")
        worst = max(worst, mean)
    print("\n| host to device copy | GB/s |\n| --- | ---: |")
    for name, value in copy_rates().items():
        print(f"| {name} | {value:.1f} |")
    if worst > MAX_MEAN_DIFF:
        print(f"gpu_check: the GPU's pixels are {worst:.2f} levels from the CPU path's "
              f"on average, beyond {MAX_MEAN_DIFF}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
