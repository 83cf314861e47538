"""Exactly once under real Lightning (2 ranks, strategy="ddp"), Accelerate and
transformers' Trainer (torchrun, 2 processes), with each framework's standard calls: every
sample trained on once per epoch, across the ranks, equal counts per rank, in a new order
in epoch 1 (tests/frameworks/lightning_child.py, tests/frameworks/accelerate_child.py and
tests/frameworks/trainer_child.py say what each run does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from packer.core.index import open_dataset
from tests.helpers import free_port, pack_wds

pytestmark = pytest.mark.frameworks  # Lightning, Accelerate and Trainer jobs in child processes
NUM = 200
RANKS = 2
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("frameworks"), NUM, 40, min_side=10, max_side=16)


def run(command: list[str], out: Path) -> None:
    # the children import tests.framework_support: the clone's root on PYTHONPATH
    path = os.pathsep.join(filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PYTHONWARNINGS": "ignore", "PYTHONPATH": path}
    done = subprocess.run(command, cwd=HERE.parents[1], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.glob("rank*.json")) == [
        f"rank{r}-epoch{e}.json" for r in range(RANKS) for e in (0, 1)], done.stderr[-3000:]


def check_exactly_once(dataset: Path, out: Path, loaders: tuple[str, ...]) -> None:
    keys = sorted(open_dataset(dataset)[1].keys())
    epochs = [[json.loads((out / f"rank{r}-epoch{e}.json").read_text()) for r in range(RANKS)]
              for e in (0, 1)]
    for name in loaders:
        for epoch, ranks in enumerate(epochs):
            seen = [key for rank in ranks for key in rank[name]]
            assert sorted(seen) == keys, f"{name}, epoch {epoch}: not every sample exactly once"
            assert len({len(rank[name]) for rank in ranks}) == 1, f"{name}: uneven ranks"
        assert epochs[0][0][name] != epochs[1][0][name], f"{name}: epoch 1 repeats epoch 0"


@pytest.mark.parametrize("where", ["inside", "before"])
def test_lightning_ddp_trains_on_every_sample_once(dataset: Path, tmp_path: Path,
                                                   where: str) -> None:
    pytest.importorskip("lightning")
    run([sys.executable, str(HERE / "lightning_child.py"), str(dataset), str(tmp_path), where],
        tmp_path)
    check_exactly_once(dataset, tmp_path, ("sampler", "shuffle", "iterable", "unbatched"))


def torchrun(child: str, dataset: Path, out: Path) -> None:
    run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
         f"--master_port={free_port()}", str(HERE / child), str(dataset), str(out)], out)


def test_accelerate_prepare_trains_on_every_sample_once(dataset: Path, tmp_path: Path) -> None:
    pytest.importorskip("accelerate")
    torchrun("accelerate_child.py", dataset, tmp_path)
    check_exactly_once(dataset, tmp_path, ("sampler", "shuffle", "iterable", "iterable_shards",
                                           "iterable_spawn", "unprepared"))


def test_hf_trainer_trains_on_every_sample_once(dataset: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    torchrun("trainer_child.py", dataset, tmp_path)
    check_exactly_once(dataset, tmp_path, ("map", "iterable", "iterable_shards",
                                           "iterable_unbatched"))
