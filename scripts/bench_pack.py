#!/usr/bin/env python
"""Pack a photo folder into every format and print images/s next to baselines.

    python -m devtools.bench.photos /tmp/photos10k --count 10000   # once
    .venv/bin/python scripts/bench_pack.py                 # 10,000 images, 3 runs
    .venv/bin/python scripts/bench_pack.py --quick         # 2,000 images, 1 run
    .venv/bin/python scripts/bench_pack.py --formats wds,npy --runs 5 --no-memory

Baselines run in this process on the same files: stock webdataset.ShardWriter,
`tar cf`, a plain PIL loop into a memmap, and the peers' writers where installed
(litdata.optimize, mosaicml-streaming's MDSWriter; devtools.bench.peers). Peak memory
compares a conversion of N images with one of 10N (the same files linked under distinct
names).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import os
import sys
from pathlib import Path

from devtools.bench.memory import convert_peak
from devtools.bench.pack import Case, linked_folder, source_files, warm
from devtools.bench.pack_report import cases_for, memory_table, run_suite, speed_table

FORMATS = ("wds", "lmdb", "hdf5", "npy")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=Path("/tmp/photos10k"),
                        help="image folder built by devtools.bench.photos (default /tmp/photos10k)")
    parser.add_argument("--count", type=int, default=None, help="use the first N images")
    parser.add_argument("--quick", action="store_true", help="2,000 images, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="runs per case (median)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_pack"),
                        help="scratch folder (same file system as --src for hard links)")
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the N vs 10N peak-memory check")
    args = parser.parse_args()
    args.count = args.count or (2000 if args.quick else None)
    args.runs = args.runs or (1 if args.quick else 3)
    args.formats = [f for f in args.formats.split(",") if f]
    unknown = set(args.formats) - set(FORMATS)
    if unknown:
        parser.error(f"unknown format(s) {sorted(unknown)}; choose from {FORMATS}")
    return args


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def memory_rows(src: Path, work: Path, count: int,
                formats: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Peak RSS of N vs 10N for pass-through conversions (--check none, and wds default)."""
    small = linked_folder(src, work / "mem-1x", count, 1)
    large = linked_folder(src, work / "mem-10x", count, 10)
    runs = [Case(fmt, "none") for fmt in formats if fmt != "npy"]
    if "wds" in formats:
        runs.append(Case("wds", "decode"))
    rows = []
    for case in runs:
        extra = ["--check", case.check]
        small_rss, _ = convert_peak(small, work / "mem-out", case.fmt, extra)
        large_rss, seconds = convert_peak(large, work / "mem-out", case.fmt, extra)
        log(f"memory {case.name}: {small_rss >> 20} MiB vs {large_rss >> 20} MiB "
            f"({seconds:.1f} s for {10 * count:,})")
        rows.append((case.name, count, small_rss, 10 * count, large_rss))
    return rows


def main() -> None:
    args = parse()
    if not args.src.is_dir():
        sys.exit(f"error: {args.src} is not a folder; build it with "
                 "python -m devtools.bench.photos /tmp/photos10k --count 10000")
    args.work.mkdir(parents=True, exist_ok=True)
    total = len(source_files(args.src))
    count = min(args.count or total, total)
    src = args.src if count == total else linked_folder(args.src, args.work / f"src-{count}",
                                                        count)
    log(f"{count:,} images ({warm(src) / count / 1000:.1f} KB average) from {src}")
    cases = cases_for(args.formats)
    results = run_suite(src, args.work, count, cases, args.runs, log)
    print(f"\n{count:,} images, median of {args.runs} run(s), images/s (higher is better); "
          "CPU µs/image counts every thread and child process\n")
    print(speed_table(results, cases, os.cpu_count() or 1))
    if args.memory:
        rows = memory_rows(args.src, args.work, min(count, 10_000), args.formats)
        print("\nPeak memory of the process tree (`pack convert` subprocess)\n")
        print(memory_table(rows))


if __name__ == "__main__":
    main()
