"""Measure `convert` against simple baselines on the same files, in the same process.

Used by `scripts/bench_pack.py`. A 2-core machine shared with other work is noisy, so
every measurement here is one timing (wall clock and CPU); the script interleaves ours
and the baselines and takes medians, and the numbers worth quoting are the ratios.

Baselines: stock `webdataset.ShardWriter` writing the same file bytes, `tar cf` of the
same files, and a plain single-process PIL loop that resizes into a memmap.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from packer import ConvertOptions, convert
from packer.encode import Check, EncodeOptions
from packer.source.scan import scan


@dataclass(frozen=True)
class Case:
    """One conversion of ours to time."""

    fmt: str
    check: Check = "decode"
    size: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        if self.size is not None:
            return f"{self.fmt} {self.size[0]}x{self.size[1]}"
        return f"{self.fmt} pass-through --check {self.check}"

    def options(self) -> EncodeOptions:
        return EncodeOptions(check=self.check, size=self.size)


def source_files(src: Path) -> list[tuple[str, str, int]]:
    """(path, key, label) of every image the scan finds, in sample order."""
    return [(item.path, item.key, item.label) for item in scan(src).items]


def _link(target: str, link: Path) -> None:
    """A hard link (same bytes, same cost to read as the original), else a symlink."""
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(target, link)
    except OSError:
        os.symlink(os.path.abspath(target), link)


def linked_folder(src: Path, out: Path, count: int, copies: int = 1) -> Path:
    """An image folder with the first `count` files of `src`, repeated `copies` times.

    Copies get distinct names (`r3_<name>`), so keys stay unique; files are links, so
    nothing is duplicated on disk. Reused when it already exists with the right size.
    """
    files = source_files(src)[:count]
    marker = out / ".complete"
    if marker.exists() and marker.read_text() == f"{len(files)}x{copies}":
        return out
    shutil.rmtree(out, ignore_errors=True)
    for copy in range(copies):
        prefix = f"r{copy}_" if copies > 1 else ""
        for path, key, _ in files:
            folder = key.rpartition("/")[0]
            _link(path, out / folder / (prefix + os.path.basename(path)))
    marker.write_text(f"{len(files)}x{copies}")
    return out


def warm(src: Path) -> int:
    """Read every file once so all contenders start from a warm page cache."""
    total = 0
    for path, _, _ in source_files(src):
        with open(path, "rb") as handle:
            total += len(handle.read())
    return total


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of one run and the CPU seconds it used (all threads, children).

    CPU time barely moves when other work shares the machine, so it says what a run
    costs even when the wall clock says mostly how busy the machine was.
    """

    wall: float
    cpu: float


def _cpu_now() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(action: Callable[[], object]) -> Timing:
    """Time one call, after flushing earlier writes so they do not interfere."""
    os.sync()
    cpu = _cpu_now()
    start = time.perf_counter()
    action()
    return Timing(time.perf_counter() - start, _cpu_now() - cpu)


def run_ours(case: Case, src: Path, dst: Path, workers: int | None = None) -> Timing:
    """One `convert` of `src` into a fresh `dst`."""
    shutil.rmtree(dst, ignore_errors=True)
    run = ConvertOptions(workers=workers, overwrite=True)
    timing = timed(lambda: convert(src, dst, case.fmt, case.options(), run))
    shutil.rmtree(dst, ignore_errors=True)
    return timing


def run_shardwriter(src: Path, dst: Path) -> Timing:
    """Stock webdataset.ShardWriter writing the same bytes (pass-through)."""
    import webdataset

    files = source_files(src)
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)

    def write() -> None:
        with webdataset.ShardWriter(str(dst / "shard-%05d.tar"), maxsize=256 << 20,
                                    verbose=0) as sink:
            for path, key, label in files:
                with open(path, "rb") as handle:
                    sink.write({"__key__": key, "jpg": handle.read(), "cls": label})

    timing = timed(write)
    shutil.rmtree(dst, ignore_errors=True)
    return timing


def run_tar(src: Path, dst: Path) -> Timing:
    """`tar cf` of the same files, for reference (C, no hashing, no fsync)."""
    dst.unlink(missing_ok=True)
    timing = timed(lambda: subprocess.run(["tar", "cf", str(dst), "-C", str(src), "."],
                                           check=True))
    dst.unlink(missing_ok=True)
    return timing


def run_pil_loop(src: Path, dst: Path, size: tuple[int, int]) -> Timing:
    """A plain single-process loop: open, RGB, resize to `size`, into a memmap."""
    files = source_files(src)
    height, width = size

    def write() -> None:
        out = np.lib.format.open_memmap(dst, mode="w+", dtype=np.uint8,
                                        shape=(len(files), height, width, 3))
        for i, (path, _, _) in enumerate(files):
            with Image.open(path) as image:
                out[i] = np.asarray(image.convert("RGB").resize((width, height)))
        out.flush()
        del out

    timing = timed(write)
    dst.unlink(missing_ok=True)
    return timing
