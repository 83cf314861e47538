"""scripts/bench_pool.py end to end on a tiny folder: packs, reads with the pool on and
off, tabulates; and the switch really turns the pool off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import readers.batching.collate as collate_module
from devtools.bench.pool import pool
from packer.testing import make_sample_folder


def test_the_switch_turns_the_pool_off_and_back_on() -> None:
    with pool(False):
        assert collate_module.worker_pool() is None
        assert not collate_module.shared_buffer((4,)).is_shared()
    assert collate_module.shared_buffer((4,), torch.uint8).is_shared()


@pytest.mark.timeout(300)
def test_bench_pool_prints_both_rates_for_every_reader(tmp_path: Path) -> None:
    src = make_sample_folder(tmp_path / "photos", count=40, classes=2, max_side=96)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "scripts/bench_pool.py", str(src), "--work",
                           str(tmp_path / "work"), "--runs", "1", "--raw-epochs", "1"],
                          cwd=root, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout
    for reader in ("wds raw", "lmdb raw", "npy 224x224", "lmdb decoded"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {reader}"))
        on, off = (float(cell.replace(",", "")) for cell in row.split("|")[2:4])
        assert on > 0 and off > 0
