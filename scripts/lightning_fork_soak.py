#!/usr/bin/env python3
"""Soak: N Lightning DDP runs in a row with persistent DataLoader workers; any hung?

    python scripts/lightning_fork_soak.py [--runs 50] [--context fork|forkserver|spawn]
        [--timeout 180] [--work DIR] [--url] [--validate] [--main-read] [--probe]

Each run (devtools/soak/lightning_fork.py) is 2 CPU ranks (gloo), PackedIterableDataset
over a small generated dataset, 2 persistent workers of the given context, 2 epochs,
under --timeout seconds: past that it is dumped with py-spy (if installed), killed and
counted as hung. --url reads the dataset as file://... (through the remote cache, with
prefetch threads); --validate adds a validation loader (its sanity-check iterator is
shut down just before the training workers start); --main-read reads a batch in the
main process first; --probe records the threads alive at every fork into each run's
forks/ folder (devtools/soak/fork_probe.py). Prints a line per run and a summary: runs,
hung, failed, time per run. Exits 1 if any run hung or failed. Not part of CI: on a
shared machine, run it under `flock /tmp/bench.lock ...`.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from devtools.soak.lightning_fork import make_dataset, soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--context", choices=["fork", "forkserver", "spawn"], default="fork")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--url", action="store_true")
    for flag in ("--validate", "--main-read", "--probe"):
        parser.add_argument(flag, action="store_true")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="soak-lightning-fork-"))
    folder = make_dataset(work / "data")
    dataset = folder.as_uri() if args.url else str(folder)
    extra = [flag for flag, on in (("--validate", args.validate),
                                   ("--main-read", args.main_read), ("--probe", args.probe))
             if on]
    print(f"{args.runs} runs, context {args.context}, {dataset}, {' '.join(extra)} "
          f"(work: {work})", flush=True)

    def progress(number: int, outcome: str, seconds: float) -> None:
        print(f"run {number}: {outcome} in {seconds:.1f} s", flush=True)

    tally = soak(dataset, work / "runs", args.runs, args.context, args.timeout, extra, progress)
    times = tally.seconds
    print(f"runs {tally.runs}, hung {len(tally.hung)} {tally.hung}, failed "
          f"{len(tally.failed)} {tally.failed}; per run: median {statistics.median(times):.1f} s, "
          f"min {min(times):.1f} s, max {max(times):.1f} s, total {sum(times):.0f} s")
    return 1 if tally.hung or tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
