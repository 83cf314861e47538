"""Converting webdataset shards and Parquet against converting the same photos from a
folder (issue 35).

The targets: shards written by stock `webdataset.ShardWriter` (1,000 samples a shard:
KEY.jpg + KEY.cls, a pax header a member as Python's tarfile writes them) to lmdb at
least at the folder's rate; a Parquet file of HF-style `{bytes, path}` image structs and
a label column (500 rows a row group) to wds at least 0.8x. Sources are built once in
`--work` from the folder and read from a warm page cache; every source is converted once
per run, interleaved, and the ratios are of median wall times.

    flock /tmp/bench.lock python -m devtools.bench.shard_speed /tmp/photos10k \\
        --work /tmp/bench-shards --runs 5
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from devtools.bench.archive_speed import _warm_file
from devtools.bench.pack import Case, Timing, linked_folder, run_ours, source_files, warm

TARGETS = {("lmdb", "wds shards"): 1.0, ("wds", "parquet"): 0.8}


def build_sources(folder: Path, work: Path) -> dict[str, Path]:
    """{kind: path}: the folder's photos as webdataset shards and as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset

    files = source_files(folder)
    shards, parquet = work / "shards", work / "photos.parquet"
    if not shards.exists():
        shards.mkdir()
        with webdataset.ShardWriter(str(shards / "photos-%06d.tar"), maxcount=1000,
                                    verbose=0) as sink:
            for path, key, label in files:
                sink.write({"__key__": key.replace("/", "_"), "jpg": Path(path).read_bytes(),
                            "cls": label})
    if not parquet.exists():
        image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        table = pa.table({
            "image": pa.array([{"bytes": Path(path).read_bytes(), "path": Path(path).name}
                               for path, _, _ in files], image),
            "label": pa.array([label for _, _, label in files], pa.int64())})
        pq.write_table(table, parquet, row_group_size=500)
    return {"wds shards": shards, "parquet": parquet}


def measure(folder: Path, sources: dict[str, Path], work: Path, runs: int
            ) -> dict[tuple[str, str], list[Timing]]:
    """{(format, source kind): timings}, each pair of a target against the folder."""
    timings: dict[tuple[str, str], list[Timing]] = {}
    for run in range(runs):
        for (fmt, kind) in TARGETS:
            for name, src in (("folder", folder), (kind, sources[kind])):
                timing = run_ours(Case(fmt, check="none"), src, work / f"out.{fmt}")
                timings.setdefault((fmt, name), []).append(timing)
                print(f"run {run + 1}/{runs}  --to {fmt:<5} {name:<10} {timing.wall:6.2f} s "
                      f"{timing.cpu:6.2f} CPU-s", flush=True)
    return timings


def report(timings: dict[tuple[str, str], list[Timing]], count: int) -> bool:
    """Print the table; whether every target was met."""
    print("| to | source | images/s | CPU µs/image | vs folder (wall) | target |")
    print("|---|---|---:|---:|---|---|")
    met = True
    for (fmt, kind), target in TARGETS.items():
        folder = statistics.median(t.wall for t in timings[(fmt, "folder")])
        runs = timings[(fmt, kind)]
        wall, cpu = statistics.median(t.wall for t in runs), statistics.median(t.cpu for t in runs)
        ratio = folder / wall
        met = met and ratio >= target
        print(f"| {fmt} | folder | {count / folder:,.0f} | | 1.00x | |")
        print(f"| {fmt} | {kind} | {count / wall:,.0f} | {cpu / count * 1e6:,.0f} | "
              f"{ratio:.2f}x | >= {target}x {'ok' if ratio >= target else 'MISS'} |")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-shards"))
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    folder = linked_folder(args.photos, args.work / "folder", args.count)
    count = len(source_files(folder))
    sources = build_sources(folder, args.work)
    warm(folder)
    for path in [*sorted(sources["wds shards"].iterdir()), sources["parquet"]]:
        _warm_file(path)
    timings = measure(folder, sources, args.work, args.runs)
    print(f"\n{count:,} photos, --check none, default workers, medians of {args.runs} runs")
    raise SystemExit(0 if report(timings, count) else 1)


if __name__ == "__main__":
    main()
