"""Does `append` of K images cost what `convert` of K images costs, whatever DST's size?

    python -m devtools.bench.append --work /tmp/append-bench --prepare
    flock /tmp/bench.lock python -m devtools.bench.append --work /tmp/append-bench

Builds an image folder of `count` small images and one of `added` more (new names,
one new class), converts the big one into every format once, then per format times,
interleaved and `--repeats` times each: `convert` of the `added` images alone into a
fresh folder, and `append` of them to a fresh copy of the big dataset (the copy is not
timed), with SRC the grown folder (scanned whole: a key DST holds costs a stat) and
with SRC the new images alone ("new only"). Prints the median seconds of each and
their ratio to the convert. Run it under `flock /tmp/bench.lock` on a shared machine:
the numbers worth quoting are the ratios.

On the shared 2-core machine (ext4, no reflinks; 20,000 images of 48-96 px, 1,000 added,
median of 5), append / convert of the 1,000: wds 2.15 (SRC = the new images alone: 1.06),
lmdb 4.31 (3.08), hdf5 4.68 (3.04), npy 2.76 (2.55). Converting 1,000 such tiny images
takes 0.07-0.22 s, so what grows with DST shows: the scan of a whole SRC and a stat per
key DST holds (~0.1 s), lmdb's and hdf5's copy of the old file (~0.15 s for 70-90 MB),
and the sha256 of the whole file for the one-file formats (~0.2 s for npy's 236 MB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from devtools.bench.photos import write_photos
from packer import ConvertOptions, EncodeOptions, append, convert
from packer.testing import make_sample_folder

FORMATS = ("wds", "lmdb", "hdf5", "npy")
NPY_SIZE = (64, 64)


def options_for(fmt: str) -> EncodeOptions | None:
    return EncodeOptions(size=NPY_SIZE) if fmt == "npy" else None


def build(work: Path, count: int, added: int, photos: bool = False
          ) -> tuple[Path, Path, Path]:
    """(the big folder, the added images alone, the big folder + the added images);
    with `photos`, the added images are photos from devtools.bench.photos."""
    big = work / "big"
    extra, union = (work / "extra-photos", work / "union-photos") if photos else \
        (work / "extra", work / "union")
    if not big.exists():
        make_sample_folder(work / "big.partial", count=count, classes=10, min_side=48,
                           max_side=96).rename(big)
    if not extra.exists():
        made = write_photos(work / "extra.partial", added, classes=11, seed=1) if photos \
            else make_sample_folder(work / "extra.partial", count=added, classes=11, seed=1,
                                    min_side=48, max_side=96)
        for path in made.rglob("*.*"):
            path.rename(path.with_name("new_" + path.name))
        made.rename(extra)
    if not union.exists():
        shutil.copytree(big, work / "union.partial")
        for path in extra.rglob("*.*"):
            target = work / "union.partial" / path.parent.name / path.name
            target.parent.mkdir(exist_ok=True)
            shutil.copy(path, target)
        (work / "union.partial").rename(union)
    return big, extra, union


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def measure(work: Path, fmt: str, big: Path, extra: Path, union: Path, repeats: int,
            workers: int | None) -> tuple[float, float, float]:
    base = work / f"big.{fmt}"
    if not base.exists():
        convert(big, base, fmt, options_for(fmt), ConvertOptions(workers=workers))
    out, grown = work / f"small.{fmt}", work / f"grown.{fmt}"
    converts: list[float] = []
    appends: list[float] = []
    alone: list[float] = []
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        converts.append(timed(partial(convert, extra, out, fmt, options_for(fmt),
                                      ConvertOptions(workers=workers))))
        for src, times in ((union, appends), (extra, alone)):
            shutil.rmtree(grown, ignore_errors=True)
            shutil.copytree(base, grown)
            os.sync()  # the copy's dirty pages are not the append's to write back
            times.append(timed(partial(append, src, grown, workers=workers)))
    return statistics.median(converts), statistics.median(appends), statistics.median(alone)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--added", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--photos", action="store_true",
                        help="the added images are ~35 KB photos (devtools.bench.photos), "
                             "not tiny generated ones: a conversion's usual cost per image")
    parser.add_argument("--prepare", action="store_true",
                        help="only build the folders and the big datasets (untimed: run it "
                             "outside the benchmark lock), then exit")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    big, extra, union = build(args.work, args.count, args.added, args.photos)
    if args.prepare:
        for fmt in args.formats.split(","):
            if not (args.work / f"big.{fmt}").exists():
                convert(big, args.work / f"big.{fmt}", fmt, options_for(fmt),
                        ConvertOptions(workers=args.workers))
        return
    kind = "photos" if args.photos else "tiny images"
    print(f"{args.count} samples + {args.added} {kind}; npy at {NPY_SIZE[0]}x{NPY_SIZE[1]}")
    print(f"{'format':8}{'convert s':>11}{'append s':>10}{'ratio':>7}"
          f"{'new only s':>12}{'ratio':>7}")
    for fmt in args.formats.split(","):
        convert_s, append_s, alone_s = measure(args.work, fmt, big, extra, union,
                                               args.repeats, args.workers)
        print(f"{fmt:8}{convert_s:11.2f}{append_s:10.2f}{append_s / convert_s:7.2f}"
              f"{alone_s:12.2f}{alone_s / convert_s:7.2f}", flush=True)

if __name__ == "__main__":
    main()
