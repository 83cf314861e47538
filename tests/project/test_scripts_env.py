"""scripts/_env.sh, the set-up of scripts/demo and scripts/test, prints no warning, and
says which torch it downloads (the CPU build where download.pytorch.org answers).

On a fresh machine `import torch` before numpy is installed warns "Failed to
initialize NumPy". A stand-in `python` on PATH plays that machine: pip "installs" by
leaving marker files, code that imports torch fails without the torch marker and
warns without the numpy one, and a find_spec probe imports nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = r"""#!/usr/bin/env bash
state="$STAND_IN_STATE"
echo "$*" >> "$state/calls"
if [[ "$1" == - ]]; then  # the CPU index probe: answers when STAND_IN_INDEX is set
  cat > /dev/null
  [[ -z "${STAND_IN_INDEX:-}" ]] || echo "$STAND_IN_INDEX"
  exit 0
fi
if [[ "$1" == -m && "$2" == pip ]]; then
  for arg in "$@"; do
    case "$arg" in torch*) touch "$state/torch" ;; numpy*) touch "$state/numpy" ;; esac
  done
  exit 0
fi
if [[ "$1" == -c && "$2" == *torch* ]]; then
  if [[ "$2" == *find_spec* ]]; then [[ -e "$state/torch" ]]; exit; fi
  [[ -e "$state/torch" ]] || { echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1; }
  [[ -e "$state/numpy" ]] || echo "UserWarning: Failed to initialize NumPy: no numpy" >&2
fi
exit 0
"""


def set_up(tmp_path: Path, present: tuple[str, ...], index: str = ""
           ) -> tuple[subprocess.CompletedProcess[str], str]:
    """Source scripts/_env.sh in an 'active virtual environment' with `present` installed,
    the CPU index answering with `index` (empty: it does not answer)."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    (bin_dir / "python").write_text(STAND_IN)
    (bin_dir / "python").chmod(0o755)
    for name in present:
        (state / name).touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VIRTUAL_ENV": str(tmp_path),
           "STAND_IN_STATE": str(state), "STAND_IN_INDEX": index}
    done = subprocess.run(["bash", "-c", f"source {ROOT / 'scripts' / '_env.sh'}"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return done, (state / "calls").read_text()


@pytest.mark.parametrize("present", [(), ("torch",), ("torch", "numpy")],
                         ids=["fresh", "torch-only", "both"])
def test_set_up_is_quiet(tmp_path: Path, present: tuple[str, ...]) -> None:
    done, calls = set_up(tmp_path, present)
    assert done.returncode == 0, done.stderr
    installs = [line for line in calls.splitlines() if line.startswith("-m pip install")]
    if "torch" in present:
        assert done.stdout == "" and done.stderr == ""
        assert not installs  # torch is never reinstalled
    else:  # one line: what is downloaded, and why not the CPU build; pip not quieted
        assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert "torch 2.13.0" in done.stderr and "CUDA build" in done.stderr
        assert len(installs) == 1 and "torch==2.13.0" in installs[0] and "numpy" in installs[0]
        assert " -q " not in installs[0] and "--index-url" not in installs[0]


def test_the_cpu_index_is_used_where_it_answers(tmp_path: Path) -> None:
    index = "https://download.pytorch.org/whl/cpu"
    done, calls = set_up(tmp_path, (), index)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"installing torch 2.13.0 (the CPU build) from {index}\n"
    installs = [line for line in calls.splitlines() if line.startswith("-m pip install")]
    assert len(installs) == 1 and f"--index-url {index}" in installs[0]
    assert "torch==2.13.0" in installs[0] and "numpy" in installs[0]
