"""A torchrun job of 2 ranks x 2 workers stops mid-epoch, and its saved state resumes on
1 rank x 0 workers and on 3 ranks x 2 workers: every key of the epoch exactly once across
the stopped and the resumed run, equal batch counts per resumed rank, repeats flagged
(tests/resume/torchrun_resume_child.py says what each run does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from packer.core.index import open_dataset
from tests.helpers import free_port, pack_wds

pytestmark = pytest.mark.frameworks  # torchrun jobs
NUM = 91  # odd: the stopped plan pads one, the 3-rank rest two
HERE = Path(__file__).parent
SETUPS = ("sampler", "iterable", "stateful")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(dataset, the stopped 2 x 2 run's folder)."""
    pytest.importorskip("torchdata")
    root = tmp_path_factory.mktemp("torchrun-resume")
    dataset = pack_wds(root, NUM, 16, min_side=8, max_side=12)
    out = root / "stop"
    out.mkdir()
    torchrun(dataset, out, 2, "stop", 2)
    return dataset, out


def torchrun(dataset: Path, out: Path, ranks: int, *args: object) -> list[dict[str, Any]]:
    """Each rank's record of a torchrun job of the child."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
               f"--master_port={free_port()}", str(HERE / "torchrun_resume_child.py"),
               str(dataset), str(out), *map(str, args)]
    # the child imports tests.framework_support: the clone's root on PYTHONPATH
    path = os.pathsep.join(filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(command, cwd=HERE.parents[1], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    mode = args[0]
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(ranks)]


@pytest.mark.parametrize(("ranks", "workers"), [(1, 0), (3, 2)])
def test_a_torchrun_job_resumes_on_another_topology(stopped: tuple[Path, Path], tmp_path: Path,
                                                    ranks: int, workers: int) -> None:
    dataset, states = stopped
    before = [json.loads((states / f"stop-rank{r}.json").read_text()) for r in range(2)]
    after = torchrun(dataset, tmp_path, ranks, "resume", workers, states)
    every = Counter(open_dataset(dataset)[1].keys())
    for setup in SETUPS:
        seen = Counter(key for run in before + after for key in run[setup]["keys"])
        assert seen == every, f"{setup} on {ranks} x {workers}: not every key exactly once"
        assert all(run[setup]["batches"] == 3 for run in before), setup
        batches = {run[setup]["batches"] for run in after}
        assert len(batches) == 1, f"{setup} on {ranks} x {workers}: uneven ranks {batches}"
        lengths = {len(run[setup]["keys"]) + len(run[setup]["padded"]) for run in after}
        assert len(lengths) == 1, f"{setup}: uneven samples per rank {lengths}"
        left = NUM - sum(len(run[setup]["keys"]) for run in before)
        assert sum(len(run[setup]["padded"]) for run in after) == -left % ranks, setup
