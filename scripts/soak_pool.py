#!/usr/bin/env python3
"""Soak readers.collate's recycled shared memory: random DataLoader rounds, all checked.

    python scripts/soak_pool.py [--rounds 200] [--seed S] [--work DIR] [--default-collate]

See devtools/soak/pool.py for what a round does. Packs a small generated source into
npy and wds once, then runs the rounds; prints a line every 10 rounds and a summary.
Exits 1 if any batch, held batch, handed-off batch or forked child saw wrong pixels.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from torch.utils.data import default_collate

from devtools.soak.pool import Tally, run
from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.testing import make_sample_folder
from readers import collate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--default-collate", action="store_true",
                        help="torch's default_collate instead, to compare with")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    work = args.work or Path(tempfile.mkdtemp(prefix="soak-pool-"))
    source = make_sample_folder(work / "src", count=96, classes=3, min_side=24, max_side=48)
    paths = {}
    for fmt in ("npy", "wds"):
        options = EncodeOptions(size=(24, 20)) if fmt == "npy" else EncodeOptions()
        convert(source, work / fmt, fmt, encode=options,
                run=ConvertOptions(workers=0, overwrite=True))
        paths[fmt] = work / fmt
    start = time.perf_counter()

    def progress(number: int, tally: Any) -> None:
        if number % 10 == 0:
            print(f"round {number}: {tally.batches} batches, {tally.held} held, "
                  f"{tally.handed_off} handed off, {tally.forked} forked, "
                  f"{len(tally.mismatches)} mismatches ({time.perf_counter() - start:.0f} s)",
                  flush=True)

    tally: Tally = run(paths, args.rounds, seed, progress,
                       default_collate if args.default_collate else collate)
    print(f"seed {seed}: {tally.rounds} rounds, {tally.batches} batches checked on arrival, "
          f"{tally.held} held to the end of their round, {tally.handed_off} handed to a "
          f"spawned process, {tally.forked} read by forked children; "
          f"{len(tally.mismatches)} mismatches")
    for line in tally.mismatches[:20]:
        print("  " + line)
    return 1 if tally.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
