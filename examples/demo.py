"""The README's first command: sample folder -> every format -> DataLoader -> table.

Run as `python -m examples.demo [WORK_DIR]` (scripts/demo does the setup first). The
first row reads the sample folder the common way (devtools.bench.baselines'
PilFolderDataset: PIL open, convert RGB, resize, to tensor; torch's default collate)
with the same DataLoader settings, and every row shows its rate against that one.

WORK_DIR (default `demo-out/`) ends up holding what the examples of README.md and docs/
open: `photos/` (the sample folder: 3 class folders) and `photos.wds`, `photos.lmdb`,
`photos.h5`, `photos.npy` packed from it (`PACKED`); the demo ends by saying so, with
the next command to try there.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader, Dataset

from devtools.bench.baselines import PilFolderDataset
from packer import ConvertOptions, convert
from packer.core.index import Index
from packer.encode import EncodeOptions
from packer.formats import FORMATS
from packer.testing import make_sample_folder
from readers import PackedDataset, PackedIterableDataset, collate

DECODE_SIZE = (224, 224)
BASELINE = "PIL ImageFolder (baseline)"
CLASSES = 3
PHOTOS = "photos"
# What each format is packed into, in WORK_DIR. wds is re-encoded as JPEG so that its
# shards hold one image type, as column-based readers (HF datasets, Ray Data) want.
PACKED = {"wds": "photos.wds", "lmdb": "photos.lmdb", "hdf5": "photos.h5", "npy": "photos.npy"}


@dataclass(frozen=True)
class Row:
    """One line of the demo table."""

    fmt: str
    style: str
    samples: int
    pack_seconds: float | None  # None: read from the folder as it is
    images_per_second: float
    files: int
    megabytes: float


def folder_stats(folder: Path) -> tuple[int, float]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files) / 1e6


def read_rate(dataset: Dataset[Any], workers: int, batch_size: int = 32,
              collate_fn: Callable[[Any], Any] | None = collate) -> tuple[int, float]:
    """Images per second through a DataLoader (readers.collate unless told), one epoch."""
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                        collate_fn=collate_fn)
    seen = 0
    start = time.perf_counter()
    for images, _labels in loader:
        seen += len(images)
    return seen, seen / (time.perf_counter() - start)


def encode_options(fmt: str, size: tuple[int, int]) -> EncodeOptions:
    """The demo's choice per format: npy resized to `size`, wds as JPEG, others as stored."""
    if fmt == "npy":
        return EncodeOptions(size=size)
    return EncodeOptions(codec="jpeg") if fmt == "wds" else EncodeOptions()


def pack(source: Path, work: Path, fmt: str, workers: int,
         size: tuple[int, int] = DECODE_SIZE) -> tuple[Path, Index, float]:
    """Pack `source` into `work / PACKED[fmt]` afresh; the dataset, its index, seconds."""
    dst = work / PACKED[fmt]
    shutil.rmtree(dst, ignore_errors=True)
    start = time.perf_counter()
    index = convert(source, dst, fmt, encode_options(fmt, size), ConvertOptions(workers=workers))
    return dst, index, time.perf_counter() - start


def run(work: Path, count: int, workers: int) -> list[Row]:
    """Generate, convert to all formats, read back each in map and iterable style."""
    source = make_sample_folder(work / PHOTOS, count=count, classes=CLASSES)
    seen, rate = read_rate(PilFolderDataset(source, DECODE_SIZE), workers, collate_fn=None)
    rows = [Row("folder", BASELINE, seen, None, rate, *folder_stats(source))]
    for fmt in FORMATS:
        dst, index, packed = pack(source, work, fmt, workers)
        files, megabytes = folder_stats(dst)
        size = None if fmt == "npy" else DECODE_SIZE
        for style, dataset in (("map", PackedDataset(dst, size=size)),
                               ("iterable", PackedIterableDataset(dst, size=size, seed=0))):
            seen, rate = read_rate(dataset, workers)
            if seen != index.num_samples and style == "map":
                raise RuntimeError(f"{dst}: read {seen} of {index.num_samples} samples")
            rows.append(Row(fmt, style, seen, packed, rate, files, megabytes))
    return rows


def where(work: Path, count: int) -> str:
    """The demo's last lines: what it wrote where, and the next command to try there,
    runnable as printed from the folder the demo ran in, with the venv not activated."""
    packed = ", ".join(PACKED.values())
    activate = shlex.quote(_shown(Path(sys.executable).parent / "activate"))
    return ("these rates: small generated images on this machine, one run (they vary run "
            "to run); the README's figures are the 10,000-photo run in docs/performance.md, "
            "\"Current figures\"\n"
            f"wrote {work}/: {PHOTOS}/ ({count} images in {CLASSES} class folders) and "
            f"{packed} packed from it\n"
            f"next: {pack_command()} info {shlex.quote(str(work / PACKED['wds']))}   "
            f"(or `source {activate}` first, then `pack ...`; then README.md's quick start)")


def pack_command() -> str:
    """`.venv/bin/pack`: the `pack` script beside this Python, a path from the current
    folder when it lies below it; `python -m pack_cli` where no script is installed."""
    script = Path(sys.executable).parent / "pack"
    if script.is_file():
        return shlex.quote(_shown(script))
    return f"{shlex.quote(sys.executable)} -c 'import pack_cli; pack_cli.main()'"


def _shown(path: Path) -> str:
    """`path` relative to the current folder when below it, else absolute."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def table(rows: list[Row]) -> str:
    """Markdown; the last column is each rate over the first row's (the baseline)."""
    baseline = rows[0].images_per_second
    lines = ["| format | reader | samples | pack s | images/s (224x224 uint8) | files | MB "
             "| vs baseline |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        packed = "-" if r.pack_seconds is None else f"{r.pack_seconds:.2f}"
        lines.append(f"| {r.fmt} | {r.style} | {r.samples} | {packed} | "
                     f"{r.images_per_second:,.0f} | {r.files} | {r.megabytes:.1f} | "
                     f"{r.images_per_second / baseline:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("work", nargs="?", default="demo-out", type=Path)
    parser.add_argument("--count", type=int, default=500, help="images in the sample folder")
    parser.add_argument("--workers", type=int, default=2, help="pack and DataLoader workers")
    args = parser.parse_args()
    shutil.rmtree(args.work / PHOTOS, ignore_errors=True)
    rows = run(args.work, args.count, args.workers)
    print(table(rows))
    print(where(args.work, args.count))


if __name__ == "__main__":
    main()
