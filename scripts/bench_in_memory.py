#!/usr/bin/env python3
"""in_memory=True measured: PSS of main + 2 workers against a naive list, read speed
against the page cache (npy, lmdb). See devtools/bench/in_memory.py.

    python scripts/bench_in_memory.py --work /tmp/bench-ram [--count 2000] [--side 160]
        [--runs 5]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import json
from pathlib import Path

from devtools.bench.in_memory import PSS_CASES, pss_case, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-ram"),
                        help="where the generated datasets are cached")
    parser.add_argument("--count", type=int, default=2000, help="images")
    parser.add_argument("--side", type=int, default=160, help="npy images are side x side")
    parser.add_argument("--runs", type=int, default=5, help="timed passes per reader")
    parser.add_argument("--case", choices=PSS_CASES, help=argparse.SUPPRESS)  # one PSS case
    parser.add_argument("folder", nargs="?", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        print(json.dumps(pss_case(args.case, args.folder)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    print(report(args.work, args.count, args.side, args.runs, Path(__file__).resolve()))


if __name__ == "__main__":
    main()
