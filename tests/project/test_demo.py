"""scripts/demo's table (examples.demo): every format beside the plain-folder baseline.

A newcomer must see what packing buys: the PIL ImageFolder-style read of the same
images with the same DataLoader settings is the first row, and every row has its
rate as a multiple of that one. The demo prints the table, then where it wrote and the
next command to try there, and nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from examples.demo import BASELINE, PACKED, run, table
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


def test_the_demo_prints_its_table_where_it_wrote_and_what_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "examples.demo", str(out),
                           "--count", "12", "--workers", "1"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warnings, no progress bars
    lines = done.stdout.splitlines()
    assert lines[2].startswith(f"| folder | {BASELINE} |")
    assert lines[-2].startswith(f"wrote {out}/: photos/ (12 images in 3 class folders)")
    assert all(name in lines[-2] and (out / name / "index.json").is_file()
               for name in PACKED.values())
    command = lines[-1].removeprefix("next: ").split("   (")[0]
    assert command.endswith(f"pack info {out / 'photos.wds'}")
    assert "source " in lines[-1] and "/activate" in lines[-1]
    # as a fresh shell runs it: in the folder the demo ran in, the venv not activated
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join(part for part in os.environ["PATH"].split(os.pathsep)
                           if Path(part).absolute() != Path(bin_dir).absolute())
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    tried = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                           timeout=120, check=False, cwd=Path.cwd(),
                           env={**env, "PATH": path})
    assert tried.returncode == 0, tried.stderr
    assert "num_samples: 12" in tried.stdout
