"""Peak memory of a conversion: the resident set of the whole process tree, sampled.

A conversion runs as a fresh `pack convert` subprocess so nothing the benchmark itself
holds is counted, and worker processes (if any) are summed in. Needs psutil (in the
`dev` extra); it is imported only here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

CLI = "import sys; from pack_cli import main; sys.exit(main())"


def tree_rss(pid: int) -> int:
    """Bytes resident in a process and all its descendants right now (0 once gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def peak_rss(command: list[str], interval: float = 0.01) -> tuple[int, float]:
    """Run `command`; return (peak tree RSS in bytes, seconds). Raises if it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(interval)
    seconds = time.perf_counter() - start
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {err.decode(errors='replace')}")
    return peak, seconds


def convert_peak(src: Path, dst: Path, fmt: str, extra: list[str]) -> tuple[int, float]:
    """Peak tree RSS and seconds of `pack convert src dst --to fmt ...` in a subprocess."""
    shutil.rmtree(dst, ignore_errors=True)
    command = [sys.executable, "-c", CLI, "convert", str(src), str(dst), "--to", fmt,
               "--quiet", "--overwrite", *extra]
    try:
        return peak_rss(command)
    finally:
        shutil.rmtree(dst, ignore_errors=True)
