"""What a Trainer-style resume costs over a prepared PackedIterableDataset loader:
readers.skip_first_batches against Accelerate's skip_first_batches, which reads the
batches it skips.

    python -m devtools.resume_skip [--count 2048] [--batch 64] [--workers 2] [--skip 16]
                                   [--side 160] [--work /tmp/resume-skip]

Packs `count` generated photos (`side` px) as wds once under --work, prepares a DataLoader
with Accelerate (one process, its dispatch_batches default, as transformers' Trainer does)
and prints a Markdown table: the seconds from iter(skip_first_batches(loader, skip)) to the
first batch after them, Accelerate's (it reads and drops them) and the readers' (the reader
starts at the position), and a fresh pass's seconds to its first batch.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import readers
from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import PackedIterableDataset


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2048, help="generated photos")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip", type=int, default=16, help="batches the resume skips")
    parser.add_argument("--side", type=int, default=160, help="photo side in pixels")
    parser.add_argument("--work", type=Path, default=Path("/tmp/resume-skip"))
    return parser.parse_args(argv)


def packed(args: argparse.Namespace) -> Path:
    """The generated photos packed as wds (once per --work, count and side)."""
    folder: Path = args.work / f"wds-{args.count}-{args.side}"
    if not (folder / "index.json").exists():
        src = make_sample_folder(args.work / f"src-{args.count}-{args.side}", count=args.count,
                                 classes=10, min_side=args.side, max_side=args.side + 32)
        convert(src, folder, "wds", run=ConvertOptions(shards=ShardOptions(max_samples=256)))
    return folder


def collate(samples: list[tuple[Any, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([torch.as_tensor(image) for image, _ in samples])
    return images, torch.tensor([label for _, label in samples])


def prepared(path: Path, args: argparse.Namespace) -> Any:
    from accelerate import Accelerator  # type: ignore[import-untyped]

    reader = PackedIterableDataset(path, size=(128, 128))
    loader = DataLoader(reader, batch_size=args.batch, num_workers=args.workers,
                        collate_fn=collate)
    return Accelerator(cpu=True).prepare(loader)


def seconds_to(batches: Iterator[Any], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        next(batches)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    from accelerate import skip_first_batches

    args = parse_args(argv)
    path = packed(args)
    accelerates = seconds_to(iter(skip_first_batches(prepared(path, args), args.skip)), 1)
    ours = seconds_to(iter(readers.skip_first_batches(prepared(path, args), args.skip)), 1)
    first = seconds_to(iter(prepared(path, args)), 1)
    print(f"| {args.count} photos, batch {args.batch}, {args.workers} workers | seconds |")
    print("| --- | ---: |")
    print(f"| accelerate.skip_first_batches({args.skip}): to the first batch after them "
          f"| {accelerates:.2f} |")
    print(f"| readers.skip_first_batches({args.skip}): to the first batch after them "
          f"| {ours:.2f} |")
    print(f"| a fresh pass: to its first batch | {first:.2f} |")


if __name__ == "__main__":
    main()
