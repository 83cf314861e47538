"""What a resume on another world size costs in reading: a re-split rest against a fresh pass.

    python -m devtools.resume_locality PHOTOS [--count 2000] [--runs 5] [--formats lmdb,wds]
                                       [--batch 64] [--workers 2] [--buffer 1024]
                                       [--work /tmp/resume-locality]

PHOTOS is an ImageFolder (`python -m devtools.bench.photos PHOTOS --count 2000` makes
one); it is packed once per format under --work, as the read benchmark packs it. Each run
reads, on 1 rank with `--workers` DataLoader workers, decoding to 224x224:

    fresh     a whole epoch
    resumed   the rest of the same epoch after 2 ranks x `--workers` workers had each
              consumed half their batches: `loop_state(..., world_size=2)` loaded into the
              1-rank reader, which reads the rest re-split (readers.plan.elastic)

for PackedIterableDataset and for PackedDataset + ChunkSampler, and prints a Markdown
table of medians over the runs: images a second from the first batch to the last, the
seconds to the first batch (what planning the rest adds) and the mean run length, the
samples per maximal run of neighbouring indices in the spans a worker (a sampler) reads:
the chunk locality of the pass. Time it alone: `flock /tmp/bench.lock python -m ...`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from devtools.bench.read import Settings, pack, subset_folder
from packer.source.scan import scan
from readers import (
    ChunkSampler,
    PackedDataset,
    PackedIterableDataset,
    PartitionOptions,
    collate,
    loop_state,
)
from readers.options import DEFAULT_BUFFER_SIZE
from readers.plan.chunks import ChunkPlan, Spans

EPOCH, SAVED_WORLD, SIZE = 1, 2, (224, 224)


def mean_run(spans: Spans) -> tuple[int, int]:
    """(samples, maximal runs of neighbouring indices) of `spans`, in read order."""
    if len(spans) == 0:
        return 0, 0
    starts, stops = spans[:, 0], spans[:, 1]
    breaks = int(np.count_nonzero(starts[1:] != stops[:-1]))
    return int((stops - starts).sum()), breaks + 1


class Recording(PackedIterableDataset):
    """PackedIterableDataset that appends each pass's span statistics to `log`."""

    log: Path

    def _stream(self, spans: Spans, plan: ChunkPlan, where: tuple[int, int, int],
                skip: int) -> Iterator[Any]:
        samples, runs = mean_run(spans)
        with self.log.open("a") as out:
            out.write(json.dumps([samples, runs]) + "\n")
        return super()._stream(spans, plan, where, skip)


class RecordingSampler(ChunkSampler):
    """ChunkSampler that appends each pass's span statistics to `log`."""

    log: Path

    def _spans(self, plan: ChunkPlan, epoch: int, rank: int) -> tuple[Spans, int]:
        spans, skip = super()._spans(plan, epoch, rank)
        samples, runs = mean_run(spans)
        with self.log.open("a") as out:
            out.write(json.dumps([samples, runs]) + "\n")
        return spans, skip


@dataclass
class Row:
    """The runs of one (reader, format, pass) case."""

    rates: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)
    samples: int = 0


def timed_pass(loader: Any) -> tuple[float, float, int]:
    """(images a second from the first batch to the last, seconds to the first, images)."""
    start = time.perf_counter()
    first: float | None = None
    images = timed = 0
    for _, labels in loader:
        images += len(labels)
        if first is None:
            first = time.perf_counter()
            continue
        timed += len(labels)
    end = time.perf_counter()
    if first is None:
        raise ValueError("an empty pass: nothing to time")
    return timed / (end - first), first - start, images


def state_after_half(batches_per_rank: int, batch: int, workers: int) -> dict[str, Any]:
    """The loop state of 2 ranks x `workers` workers that consumed half their batches."""
    return loop_state(EPOCH, batches_per_rank // 2, batch, workers, world_size=SAVED_WORLD)


def one_run(kind: str, path: Path, resumed: bool, args: argparse.Namespace,
            log: Path) -> tuple[float, float, int, float]:
    """(rate, seconds to the first batch, images, mean run length) of one pass."""
    log.unlink(missing_ok=True)
    partition = PartitionOptions(rank=0, world_size=1, buffer_size=args.buffer)
    saved = PartitionOptions(rank=0, world_size=SAVED_WORLD, buffer_size=args.buffer)
    options: dict[str, Any] = {"batch_size": args.batch, "num_workers": args.workers,
                               "collate_fn": collate}
    if kind == "iterable":
        data: Any = Recording(path, size=SIZE, partition=partition)
        data.log = log
        holder: Any = data
        per_rank = len(PackedIterableDataset(path, decode="raw", partition=saved))
    else:
        data = PackedDataset(path, size=SIZE)
        holder = RecordingSampler(data, partition=partition)
        holder.log = log
        options["sampler"] = holder
        per_rank = len(ChunkSampler(data, partition=saved))
    if resumed:  # half the batches of a saved rank: at most half of what its workers make
        holder.load_state_dict(state_after_half(-(-per_rank // args.batch), args.batch,
                                                args.workers))
    else:
        holder.set_epoch(EPOCH)
    rate, first, images = timed_pass(DataLoader(data, **options))
    stats = [json.loads(line) for line in log.read_text().splitlines()]
    samples, runs = (sum(column) for column in zip(*stats, strict=True))
    return rate, first, images, samples / runs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos", type=Path, help="an ImageFolder (devtools.bench.photos)")
    parser.add_argument("--count", type=int, default=2000, help="photos of it to pack")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--formats", default="lmdb,wds")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--buffer", type=int, default=DEFAULT_BUFFER_SIZE,
                        help="the shuffle buffer (PartitionOptions.buffer_size)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/resume-locality"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    total = len(scan(args.photos).items)
    count = min(args.count, total)
    tag = args.work / f"{args.photos.name}-{count}"
    src = subset_folder(args.photos, tag / "src", count) if count < total else args.photos
    settings = Settings(src=src, work=args.work)
    rows: dict[tuple[str, str, str], Row] = {}
    for fmt in args.formats.split(","):
        path = pack(src, tag / fmt, fmt, count, settings, lambda _: None)
        for _ in range(args.runs):
            for kind in ("iterable", "sampler"):
                for resumed in (False, True):
                    name = "resumed 2 -> 1 rank" if resumed else "fresh"
                    row = rows.setdefault((kind, fmt, name), Row())
                    rate, first, images, run = one_run(kind, path, resumed, args,
                                                        args.work / "spans.jsonl")
                    row.rates.append(rate)
                    row.firsts.append(first)
                    row.runs.append(run)
                    row.samples = images
    print(f"| reader | format | pass | images | images/s | s to 1st batch | mean run "
          f"| ({args.runs} runs, medians; {count} photos, batch {args.batch}, "
          f"{args.workers} workers, buffer {args.buffer}, decode 224x224)")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for (kind, fmt, name), row in rows.items():
        reader = "PackedIterableDataset" if kind == "iterable" else "PackedDataset + ChunkSampler"
        print(f"| {reader} | {fmt} | {name} | {row.samples} | "
              f"{statistics.median(row.rates):.0f} | {statistics.median(row.firsts):.2f} | "
              f"{statistics.median(row.runs):.1f} |")


if __name__ == "__main__":
    main()
