"""What `pack stats` costs against `pack verify` and against decoding every image alone.

    python -m devtools.bench.photos /tmp/photos10k --count 10000
    flock /tmp/bench.lock python -m devtools.bench.stats_cost /tmp/photos10k --runs 3

Packs the photos into wds once (untimed), then times, interleaved, medians of `--runs`:
`verify`, `stats` (every pixel), `stats --pixel-samples 1000`, `dedup --near` (the first
report, and a second one that finds the kept hashes), and the floor of an exact mean
and std: decoding every stored image at its stored size with libjpeg-turbo on one
thread per CPU, nothing else. `stats` over every pixel cannot beat that floor; the
ratio `stats` / floor is what the tallies add.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import simplejpeg

from packer import convert, stats, verify
from packer.core.index import open_dataset
from packer.core.layout import NEAR_NAME
from packer.dataset.near import near_duplicates
from packer.formats import load
from packer.imaging.pillow import load_rgb


def decode_floor(folder: Path) -> None:
    """Decode every image of `folder` once, a thread per CPU (what exact stats must do)."""
    index, table = open_dataset(folder)
    reader = load(index.format).open_reader(folder, index, table)
    chunks = [(start, min(start + 256, len(table))) for start in range(0, len(table), 256)]

    def chunk(bounds: tuple[int, int]) -> None:
        for data in reader.read_range(*bounds):
            if simplejpeg.is_jpeg(bytes(data)):
                simplejpeg.decode_jpeg(bytes(data), colorspace="RGB")
            else:
                load_rgb(bytes(data))

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(chunk, chunks))
    reader.close()


def first_near(folder: Path) -> None:
    (folder / NEAR_NAME).unlink(missing_ok=True)
    near_duplicates(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("photos", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/stats-cost"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    folder = args.work / "photos.wds"
    if not folder.exists():
        convert(args.photos, folder, "wds")
    cases: dict[str, Callable[[], object]] = {
        "pack verify": lambda: verify(folder),
        "decode every image (floor)": lambda: decode_floor(folder),
        "pack stats (every pixel)": lambda: stats(folder),
        "pack stats --pixel-samples 1000": lambda: stats(folder, max_pixel_samples=1000),
        "pack dedup --near (first)": lambda: first_near(folder),
        "pack dedup --near (kept hashes)": lambda: near_duplicates(folder),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, action in cases.items():
            start = time.perf_counter()
            action()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times["pack verify"])
    print(f"{'case':34}{'median s':>10}{'vs verify':>11}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:34}{median:10.2f}{median / base:10.2f}x")


if __name__ == "__main__":
    main()
