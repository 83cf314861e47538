"""scripts/demo's table (examples.demo): every format beside the plain-folder baseline.

A newcomer must see what packing buys: the PIL ImageFolder-style read of the same
images with the same DataLoader settings is the first row, and every row has its
rate as a multiple of that one. The demo prints the table and nothing else.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from examples.demo import BASELINE, run, table
from packer.formats import FORMATS


def test_the_table_has_the_baseline_and_a_ratio_per_row(tmp_path: Path) -> None:
    rows = run(tmp_path, count=12, workers=0)
    assert rows[0].style == BASELINE and rows[0].pack_seconds is None
    assert [row.fmt for row in rows[1:]] == [fmt for fmt in FORMATS for _ in range(2)]
    assert all(row.samples == 12 for row in rows[:3])
    lines = table(rows).splitlines()
    assert lines[0].endswith("| vs baseline |") and len(lines) == 2 + len(rows)
    assert lines[2].startswith(f"| folder | {BASELINE} | 12 | - |")
    assert lines[2].endswith("| 1.00x |")
    baseline = rows[0].images_per_second
    for row, line in zip(rows[1:], lines[3:], strict=True):
        assert line.endswith(f"| {row.images_per_second / baseline:.2f}x |")


def test_the_demo_prints_only_its_table(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "examples.demo", str(tmp_path / "out"),
                           "--count", "12", "--workers", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warnings, no progress bars
    assert done.stdout.splitlines()[2].startswith(f"| folder | {BASELINE} |")
