#!/usr/bin/env python3
"""Read a photo folder packed in every format through a DataLoader; compare with baselines.

    python scripts/bench_read.py /tmp/photos10k --work /tmp/bench-read [--runs 3]
        [--formats wds,lmdb,hdf5,npy] [--suite all|peers] [--quick]

The folder comes from `python -m devtools.bench.photos OUT --count 10000`.
Packed copies are cached under --work. Prints a markdown table (medians of --runs
interleaved runs, ratios against the baselines run in the same process), train-time
crops (augment=) included, against ImageFolder + Pillow crop and resize. `--suite peers`
reads wds, lmdb and npy against the peers instead: stock webdataset, litdata and
mosaicml-streaming (each written once under --work with its own writer, read through its
own loader; one not installed is skipped with a note), raw bytes and rgb8.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import sys
from pathlib import Path

from devtools.bench.read import (
    FORMATS,
    PEER_FORMATS,
    SUITES,
    Settings,
    build_cases,
    markdown,
    pack_all,
    run_cases,
)

QUICK_COUNT = 1000


def parse_args(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="image folder (class sub-folders)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-read"),
                        help="where packed copies are cached")
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--formats", default=None,
                        help=f"comma-separated subset of {','.join(FORMATS)} "
                        f"(default: all; {','.join(PEER_FORMATS)} with --suite peers)")
    parser.add_argument("--suite", choices=SUITES, default="all",
                        help="all: every case; peers: ours against stock webdataset, "
                        "litdata and mosaicml-streaming")
    parser.add_argument("--epochs", type=int, default=2,
                        help="timed epochs a run, from the first batch (default 2)")
    parser.add_argument("--warmup-epochs", type=int, default=1,
                        help="untimed epochs before them (default 1)")
    parser.add_argument("--raw-epochs", type=int, default=None,
                        help="timed epochs of the raw and npy cases, which read 10-50x "
                        "faster (default: 6 with --suite peers, else --epochs)")
    parser.add_argument("--count", type=int, default=None, help="use this many images")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_COUNT} images, 1 run: a smoke test")
    args = parser.parse_args(argv)
    default = PEER_FORMATS if args.suite == "peers" else FORMATS
    formats = tuple(name for name in args.formats.split(",") if name) \
        if args.formats is not None else default
    unknown = set(formats) - set(FORMATS)
    if unknown:
        parser.error(f"unknown format(s) {', '.join(sorted(unknown))}")
    runs = args.runs if args.runs is not None else 1 if args.quick else 3
    if runs < 1 or args.epochs < 1 or args.warmup_epochs < 0:
        parser.error("--runs and --epochs must be at least 1, --warmup-epochs at least 0")
    raw_epochs = args.raw_epochs or (6 if args.suite == "peers" else None)
    count = QUICK_COUNT if args.quick and args.count is None else args.count
    return Settings(src=args.src, work=args.work, formats=formats,
                    runs=runs, count=count, suite=args.suite,
                    epochs=args.epochs, warmup_epochs=args.warmup_epochs,
                    raw_epochs=raw_epochs)


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    src, packed = pack_all(settings, progress)
    cases = build_cases(settings, src, packed)
    run_cases(cases, settings, progress)
    print(markdown(cases, settings))


if __name__ == "__main__":
    main()
