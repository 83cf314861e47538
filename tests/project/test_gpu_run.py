"""devtools/gpu_run.sh, the GPU check carried to a machine without network, runs end to end
on the CPU: it installs only the wheels it is given, runs the check with the stand-in
decoder through the device code path, and leaves the Markdown report in $OUT."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel, built here: what the script installs offline."""
    folder.mkdir(parents=True)
    path = folder / "gpu_marker-1.0-py3-none-any.whl"
    files = {"gpu_marker.py": b"CARRIED = True\n",
             "gpu_marker-1.0.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: gpu-marker\nVersion: 1.0\n",
             "gpu_marker-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("gpu_marker-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("gpu_marker-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="the GPU machines run Linux")
def test_the_carried_check_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    _wheel(tmp_path / "wheels")
    out, site = tmp_path / "out", tmp_path / "site"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
           "GPU_WHEELS": str(tmp_path / "wheels"), "GPU_SITE": str(site)}
    done = subprocess.run(
        ["bash", "devtools/gpu_run.sh", "--device", "cpu", "--count", "40", "--batch", "8",
         "--batches", "2", "--workers", "0", "--size", "32", "--work", str(tmp_path / "work")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (site / "gpu_marker.py").read_text() == "CARRIED = True\n"
    report = (out / "gpu_check.md").read_text()
    for heading in ("## Setup", "## Loading", "## Pixels against the CPU path", "## Goals"):
        assert heading in report
    assert "| decoder | stand-in (libjpeg-turbo) |" in report
    assert "| hazard run: 0 batches differ | 0 of 2 | yes |" in report
    assert "| stand-in (libjpeg-turbo) | 0.1" in report  # the decoders' table: its row
    agreement = [line for line in report.splitlines() if line.startswith("| RandomResizedCrop")]
    mean = float(agreement[0].split("|")[3])
    assert mean <= 1.0
    assert {"gpu_check.log", "install.log", "build.log", "nvidia-smi.txt"} <= {
        path.name for path in out.iterdir()}
