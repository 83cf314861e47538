#!/usr/bin/env python3
"""Soak: hundreds of interrupted conversions per format, and memory at a million samples.

    python scripts/soak.py [--rounds 300] [--formats wds,lmdb,hdf5,npy] [--seed S]
                           [--work DIR] [--million] [--flips N] [--no-kills]

Each round is one of tests/faults/test_faults_kill.py's (see devtools.faults.kills): SIGKILL rounds,
then SIGINT rounds (half as many), at I/O events and random times, some resumes
interrupted too. Prints one line per format and signal: interruptions sent, how many
stopped a running conversion, how many left a complete dataset or a refused one, and
how many rounds ended byte-identical to an uninterrupted run. --million also builds a
1,000,000-sample dataset and reports its index load cost and the worker USS over 3
epochs with 2 persistent workers. --flips N flips two bytes at N places spread over
each format's data file and reads every sample back (devtools.faults.flips): intact, refused,
or crashed. Exits 1 if any promise failed (a flip crash is reported, not a failure:
LMDB trusts its page pointers).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from devtools.faults.flips import flip_scan
from devtools.faults.forkserver import ForkServer
from devtools.faults.kills import (
    Figures,
    make_kill_source,
    reference_run,
    run_rounds,
    standard_case,
)
from devtools.scale.index import index_load_cost, make_tiny_dataset
from devtools.scale.workers import growth, worker_uss_by_epoch
from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.formats.base import ShardOptions

FORMATS = ("wds", "lmdb", "hdf5", "npy")
DATA_FILES = {"wds": "flip-wds-00001.tar",  # shards carry their folder's name, flip-wds
              "lmdb": "data.lmdb/data.mdb", "hdf5": "data.h5", "npy": "images.npy"}


def kills(work: Path, formats: list[str], rounds: int, seed: str) -> list[Figures]:
    src = make_kill_source(work / "src")
    results = []
    with ForkServer() as server:
        for fmt in formats:
            case = standard_case(src, fmt)
            (work / fmt).mkdir()
            reference = reference_run(server, case, work / fmt)
            for signum, count in ((signal.SIGKILL, rounds), (signal.SIGINT, rounds // 2)):
                start = time.monotonic()
                figures = run_rounds(server, case, reference, work / fmt, count, signum,
                                     f"{seed}:{fmt}")
                print(f"{fmt:5} {figures.signal:7} rounds {figures.rounds:4}  sent "
                      f"{figures.sent:4}  landed {figures.landed:4}  complete "
                      f"{figures.complete:4}  refused {figures.refused:4}  byte-identical "
                      f"{figures.identical:4}/{figures.rounds}  ({time.monotonic() - start:.0f} s)",
                      flush=True)
                for failure in figures.failures[:5]:
                    print("  FAILED", failure[:2000], flush=True)
                results.append(figures)
    return results


def flips(work: Path, formats: list[str], count: int) -> bool:
    src = make_kill_source(work / "flip-src")
    ok = True
    for fmt in formats:
        dst = work / f"flip-{fmt}"
        convert(src, dst, fmt, EncodeOptions(size=(16, 16)) if fmt == "npy" else None,
                ConvertOptions(workers=0, shards=ShardOptions(max_samples=6)))
        start = time.monotonic()
        outcomes = flip_scan(dst, DATA_FILES[fmt], work / "flips", count)
        print(f"{fmt:5} {sum(outcomes.values())} flips in {DATA_FILES[fmt]}: "
              f"{dict(sorted(outcomes.items()))} ({time.monotonic() - start:.0f} s)", flush=True)
        ok = ok and not any(name.startswith("other") for name in outcomes)
    return ok


def million(work: Path) -> bool:
    start = time.monotonic()
    folder = make_tiny_dataset(work / "million", 1_000_000)
    print(f"made a 1,000,000-sample dataset in {time.monotonic() - start:.1f} s", flush=True)
    cost = index_load_cost(folder)
    print(f"index load: {cost['seconds']:.3f} s, traced peak {cost['peak_bytes'] / 2**20:.1f} "
          f"MiB, RSS +{cost['rss_bytes'] / 2**20:.1f} MiB", flush=True)
    ok = cost["seconds"] < 1 and max(cost["peak_bytes"], cost["rss_bytes"]) < 100 * 2**20
    for kind in ("map", "iterable"):
        result = worker_uss_by_epoch(folder, epochs=3, kind=kind)
        uss = cast("list[list[int]]", result["worker_uss"])
        seconds = cast("list[float]", result["seconds"])
        change = growth(uss)
        print(f"{kind:8} 2 persistent workers, 3 epochs of {result['samples_per_epoch']}: USS "
              f"MiB {[[round(u / 2**20, 1) for u in epoch] for epoch in uss]}, growth "
              f"{100 * change:+.2f}%, seconds {[round(s, 1) for s in seconds]}",
              flush=True)
        ok = ok and change < 0.05
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300, help="SIGKILL rounds per format")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--seed", default=os.urandom(4).hex())
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder (default: a new one in /dev/shm or /tmp)")
    parser.add_argument("--million", action="store_true", help="also the 1M-sample checks")
    parser.add_argument("--flips", type=int, default=0, help="byte flips per format")
    parser.add_argument("--no-kills", action="store_true", help="skip the kill rounds")
    args = parser.parse_args()
    formats = [name for name in args.formats.split(",") if name]
    if set(formats) - set(FORMATS):
        parser.error(f"formats are {', '.join(FORMATS)}")
    shm = Path("/dev/shm")
    work = args.work or Path(tempfile.mkdtemp(
        prefix="packer-soak-", dir=shm if os.access(shm, os.W_OK) else None))
    work.mkdir(parents=True, exist_ok=True)
    print(f"seed {args.seed}, work {work}", flush=True)
    ok = True
    try:
        if not args.no_kills:
            results = kills(work, formats, args.rounds, args.seed)
            ok = all(not figures.failures for figures in results)
            print(f"total: {sum(f.sent for f in results)} interruptions sent, "
                  f"{sum(f.landed for f in results)} stopped a running conversion, "
                  f"{sum(f.identical for f in results)}/{sum(f.rounds for f in results)} "
                  "rounds byte-identical after resume", flush=True)
        if args.flips:
            ok = flips(work, formats, args.flips) and ok
        if args.million:
            ok = million(work) and ok
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
