"""Readers under resource limits: few file descriptors, Ctrl-C, read-only folders.

The wds dataset here has 96 shards of 2 samples, more than `ulimit -n 64` allows open
at once: a worker must not keep every shard it has read open (WdsReader keeps at most
MAX_OPEN_SHARDS). Training loops run as child processes (tests/faults/loader_child.py), so
limits and signals reach them and not the test runner.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from torch.utils.data import DataLoader

from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.formats._wds import MAX_OPEN_SHARDS
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import ChunkSampler, PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from tests.helpers import FORMATS

ROOT = Path(__file__).resolve().parents[2]
NUM = 192
NUM_SHARDS = 96
MAX_FDS = 64
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("resources")
    src = make_sample_folder(root / "src", count=NUM, classes=4, min_side=16, max_side=24)
    out = {}
    for fmt in FORMATS:
        options = EncodeOptions(size=(8, 8)) if fmt == "npy" else None
        convert(src, root / fmt, fmt, options,
                ConvertOptions(workers=0, shards=ShardOptions(max_samples=NUM // NUM_SHARDS)))
        out[fmt] = root / fmt
    assert len(list(out["wds"].glob("*.tar"))) == NUM_SHARDS > MAX_FDS > MAX_OPEN_SHARDS
    return out


def start_loop(path: Path, *args: str, limit_fds: int | None = None) -> subprocess.Popen[str]:
    def limit() -> None:
        if limit_fds is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit_fds, limit_fds))

    return subprocess.Popen([sys.executable, "-m", "tests.faults.loader_child", str(path), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=limit)


def finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Wait for the loop; a hang is a failure (and its process group is killed)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the training loop hung for {timeout} s")


def group_alive(pgid: int) -> list[int]:
    """Processes of the group that are still running (zombies awaiting a reaper excluded)."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


# ---------------------------------------------------------------- ulimit -n 64


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("fmt", "kind"), [("wds", "map"), ("wds", "iterable"),
                                           ("lmdb", "iterable")])
def test_epochs_under_ulimit_n_64(packed: dict[str, Path], fmt: str, kind: str) -> None:
    proc = start_loop(packed[fmt], "--kind", kind, "--workers", "2", "--epochs", "1",
                      limit_fds=MAX_FDS)
    out, err = finish(proc, timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert f"epoch 0 samples {NUM}" in out, out


# ---------------------------------------------------------------- open files stay flat


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("fmt", "kind"), [("wds", "map"), ("wds", "iterable"), ("lmdb", "map"),
                                           ("hdf5", "iterable"), ("npy", "map")])
def test_open_files_stay_constant_over_5_epochs(packed: dict[str, Path], fmt: str,
                                                kind: str) -> None:
    """Two persistent workers: the same descriptors open after every epoch (main + workers)."""
    proc = start_loop(packed[fmt], "--kind", kind, "--workers", "2", "--epochs", "5")
    out, err = finish(proc, timeout=100)
    assert proc.returncode == 0, err[-2000:]
    epochs = [line.split() for line in out.splitlines() if line.startswith("epoch")]
    assert [int(words[3]) for words in epochs] == [NUM] * 5
    counts = [int(words[5]) for words in epochs]
    print(f"{fmt} {kind}: open files after each epoch {counts}")
    assert len(set(counts)) == 1, counts
    if fmt == "wds":  # not one descriptor per shard read: at most MAX_OPEN_SHARDS per worker
        assert counts[0] < NUM_SHARDS


# ---------------------------------------------------------------- Ctrl-C


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("fmt", "kind", "target"), [("wds", "iterable", "group"),
                                                     ("lmdb", "map", "group"),
                                                     ("wds", "map", "main process")])
def test_ctrl_c_mid_epoch_exits_within_10_s_leaving_no_process(
        packed: dict[str, Path], fmt: str, kind: str, target: str) -> None:
    """SIGINT to the process group (a terminal's Ctrl-C) or to the main process only."""
    proc = start_loop(packed[fmt], "--kind", kind, "--workers", "2", "--epochs", "1000",
                      "--sleep", "0.02")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started", finish(proc, 30)
    assert len(group_alive(proc.pid)) == 3  # the loop and its two workers
    time.sleep(0.3)  # mid-epoch
    if target == "group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGINT)
    start = time.monotonic()
    finish(proc, timeout=30)
    while group_alive(proc.pid) and time.monotonic() - start < 10:
        time.sleep(0.05)
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"{elapsed:.1f} s after Ctrl-C, {group_alive(proc.pid)} still run"
    assert not group_alive(proc.pid)


# ---------------------------------------------------------------- read-only folder


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path (hidden ones too) with its size, mtime and mode."""
    out = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        out[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns, info.st_mode)
    return out


def chmod_tree(folder: Path, change: Callable[[int], int]) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(change(stat.S_IMODE(path.stat().st_mode)))


def test_four_workers_change_nothing_in_a_read_only_folder(packed: dict[str, Path],
                                                           tmp_path: Path, fmt: str) -> None:
    folder = shutil.copytree(packed[fmt], tmp_path / fmt)
    chmod_tree(folder, lambda mode: mode & ~0o222)
    try:
        before = snapshot(folder)
        ds = PackedDataset(folder, size=(8, 8), chunk_size=8)
        it = PackedIterableDataset(folder, size=(8, 8), partition=PartitionOptions(chunk_size=8))
        for loader in (DataLoader(ds, batch_size=8, num_workers=4, sampler=ChunkSampler(ds),
                                  multiprocessing_context="fork"),
                       DataLoader(it, batch_size=8, num_workers=4,
                                  multiprocessing_context="fork")):
            assert sum(len(batch[1]) for batch in loader) == NUM
        assert snapshot(folder) == before, "reading changed the dataset folder"
    finally:
        chmod_tree(folder, lambda mode: mode | 0o200)
