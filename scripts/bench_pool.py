#!/usr/bin/env python3
"""Read a photo folder through `readers.collate` with the batch pool on and off.
See devtools/bench/pool.py.

    python scripts/bench_pool.py /tmp/photos10k --work /tmp/bench-pool [--runs 3]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

# devtools/ (the harness, not shipped) sits beside scripts/: import it from the checkout
_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))

import argparse
import sys
from pathlib import Path

from devtools.bench.pool import cases, markdown, measure, packed_copies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="image folder (class sub-folders)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-pool"),
                        help="where the packed copies are cached")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs (medians)")
    parser.add_argument("--raw-epochs", type=int, default=6,
                        help="timed epochs of the raw and npy cases (the decoded one: 1)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    all_cases = cases(packed_copies(args.src, args.work), args.raw_epochs)
    rates = measure(all_cases, args.runs, lambda line: print(line, file=sys.stderr, flush=True))
    print(markdown(all_cases, rates))


if __name__ == "__main__":
    main()
