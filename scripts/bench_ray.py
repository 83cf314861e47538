#!/usr/bin/env python3
"""Time `pack convert` with the local threads and with Ray, start-up included.

    python -m devtools.bench.photos /tmp/photos10k --count 10000   # once
    .venv/bin/python scripts/bench_ray.py [--src /tmp/photos10k] [--runs 3] [--shard-samples 1000]

Three ways to pack the same folder into wds, interleaved run by run, medians printed:
local threads; Ray with the driver writing every shard; Ray tasks writing the shards
(--shard-samples). Each Ray run starts its own private instance, as `pack convert
--executor ray` does without --ray-address. The local and the Ray-written outputs (same
--shard-samples) must be byte-identical; the script checks it and exits 1 if not.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PACK = str(Path(sys.executable).with_name("pack"))  # the console script beside this Python

CASES = {
    "local threads (default)": [],
    "ray, driver writes": ["--executor", "ray"],
    "ray, tasks write shards": ["--executor", "ray"],
}


def tree_hashes(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below `root`."""
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def run_case(src: Path, dst: Path, extra: list[str]) -> float:
    shutil.rmtree(dst, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([PACK, "convert", str(src), str(dst), "--to", "wds", "-q", *extra],
                   check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("/tmp/photos10k"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shard-samples", type=int, default=1000)
    args = parser.parse_args()
    count = sum(1 for path in args.src.rglob("*") if path.is_file())
    grouped = ["--shard-samples", str(args.shard_samples)]
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    times: dict[str, list[float]] = {name: [] for name in CASES}
    try:
        for run in range(args.runs):
            for number, (name, extra) in enumerate(CASES.items()):
                shards = grouped if number != 1 else []
                seconds = run_case(args.src, work / str(number), [*extra, *shards])
                times[name].append(seconds)
                print(f"run {run + 1}/{args.runs}: {name}: {seconds:.2f} s", flush=True)
        same = tree_hashes(work / "0") == tree_hashes(work / "2")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{count:,} files from {args.src}, wds pass-through, median of {args.runs} runs\n")
    print("| case | seconds | images/s |\n|---|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {count / median:,.0f} |")
    print(f"\nlocal and Ray-written shards (--shard-samples {args.shard_samples}) "
          f"byte-identical: {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
