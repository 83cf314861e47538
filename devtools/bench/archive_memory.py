"""Peak memory of converting a tar of N tiny images, for two N: does it stay flat?

The issue's bound: from 10k to 100k members the peak RSS of `pack convert tar DST --to
wds` (pass-through) grows at most 1.5x. Each archive is a tar of tiny generated JPEGs
in 10 class folders, built in a temporary folder (TMPDIR) and deleted afterwards; each
conversion runs in a fresh subprocess (devtools.bench.memory), `--repeat` times, and
the median peak counts.

    flock /tmp/bench.lock python -m devtools.bench.archive_memory --counts 10000 100000
"""

from __future__ import annotations

import argparse
import io
import statistics
import tarfile
import tempfile
from pathlib import Path

from devtools.bench.memory import convert_peak

CLASSES = 10
DISTINCT = 64  # different images, reused under different names
BOUND = 1.5


def tiny_jpegs(count: int = DISTINCT) -> list[bytes]:
    """`count` different 8x8 JPEGs (a few hundred bytes each)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), np.uint8)).save(buffer, "JPEG")
        out.append(buffer.getvalue())
    return out


def write_tar(path: Path, count: int) -> Path:
    """A tar of `count` tiny JPEGs, `class_K/img_N.jpg`, in name order."""
    images = tiny_jpegs()
    with tarfile.open(path, "w") as tar:
        for n in range(count):
            data = images[n % len(images)]
            info = tarfile.TarInfo(f"class_{n * CLASSES // count:02d}/img_{n:07d}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def measure(counts: list[int], repeat: int, extra: list[str]) -> dict[int, int]:
    """{count: median peak RSS in bytes} of converting a tar of each count."""
    peaks: dict[int, int] = {}
    with tempfile.TemporaryDirectory(prefix="archive-memory-") as work:
        for count in counts:
            archive = write_tar(Path(work) / f"tiny-{count}.tar", count)
            runs = [convert_peak(archive, Path(work) / "out", "wds", extra)
                    for _ in range(repeat)]
            archive.unlink()
            peaks[count] = int(statistics.median(peak for peak, _ in runs))
            seconds = statistics.median(s for _, s in runs)
            print(f"{count:>9,} members: peak RSS {peaks[count] / 2**20:7.1f} MiB "
                  f"(median of {repeat}; {seconds:.1f} s a run)", flush=True)
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more `pack convert` options (after --)")
    args = parser.parse_args()
    peaks = measure(args.counts, args.repeat, args.extra)
    small, large = args.counts
    ratio = peaks[large] / peaks[small]
    verdict = "within" if ratio <= BOUND else "OVER"
    print(f"ratio {large:,} / {small:,}: {ratio:.2f}x ({verdict} the {BOUND}x bound)")
    raise SystemExit(0 if ratio <= BOUND else 1)


if __name__ == "__main__":
    main()
