"""N Lightning DDP runs in a row, each under a timeout: does any hang at worker start?

What scripts/lightning_fork_soak.py runs. Each run is devtools.soak.lightning_fork_child
(2 CPU ranks, gloo, PackedIterableDataset, 2 persistent workers of the chosen
multiprocessing context) in a process group of its own; a run that has not ended when
its time is up is dumped with py-spy where it is installed (both ranks and their
workers, into the run's folder), killed with its whole group, and counted as hung.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from packer import ConvertOptions, convert
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder

CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass
class Tally:
    """What the runs did: how many, which hung or failed, and how long each took."""

    runs: int = 0
    hung: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def make_dataset(work: Path, count: int = 200) -> Path:
    """A small generated source packed as wds in shards of 40 samples."""
    source = make_sample_folder(work / "src", count=count, classes=3, min_side=10, max_side=16)
    run = ConvertOptions(workers=0, overwrite=True, shards=ShardOptions(max_samples=40))
    convert(source, work / "wds", "wds", run=run)
    return work / "wds"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _dump_stacks(pid: int, out: Path) -> None:
    """py-spy dump of the run's processes (ranks and workers), where py-spy is found."""
    spy = shutil.which("py-spy")
    if spy is None:
        return
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    with (out / "py-spy.txt").open("w") as log:
        for proc in tree:
            try:
                command = " ".join(proc.cmdline())
            except psutil.Error:  # ended (or a zombie) since the tree was listed
                continue
            log.write(f"--- pid {proc.pid}: {command}\n")
            log.flush()
            subprocess.run([spy, "dump", "--native", "--pid", str(proc.pid)], stdout=log,
                           stderr=subprocess.STDOUT, timeout=60, check=False)


def one_run(dataset: str, out: Path, context: str, timeout: float, extra: list[str]) -> str:
    """One run: "ok", "hung" (killed at `timeout`) or "failed" (exited non-zero, or a
    rank never finished fit). Its output goes to out/log.txt."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(CHECKOUT)}
    command = [sys.executable, "-m", "devtools.soak.lightning_fork_child", dataset, str(out),
               "--context", context, *extra]
    with (out / "log.txt").open("w") as log:
        proc = subprocess.Popen(command, cwd=CHECKOUT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _dump_stacks(proc.pid, out)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "hung"
    done = sorted(path.name for path in out.glob("rank*.done"))
    return "ok" if code == 0 and done == ["rank0.done", "rank1.done"] else "failed"


def soak(dataset: str, work: Path, runs: int, context: str, timeout: float,
         extra: list[str], progress: Callable[[int, str, float], None]) -> Tally:
    """`runs` runs in a row; `progress(number, outcome, seconds)` after each."""
    tally = Tally()
    for number in range(runs):
        start = time.perf_counter()
        outcome = one_run(dataset, work / f"run{number:03d}", context, timeout, extra)
        tally.runs += 1
        tally.seconds.append(time.perf_counter() - start)
        if outcome == "hung":
            tally.hung.append(number)
        elif outcome == "failed":
            tally.failed.append(number)
        progress(number, outcome, tally.seconds[-1])
    return tally
