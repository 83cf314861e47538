"""Lightning's own mid-epoch resume, `trainer.fit(model, ckpt_path=...)` from a checkpoint
that `ModelCheckpoint(every_n_train_steps=...)` saved, trains on the rest of that epoch
exactly once, in a new process, then on the whole next epoch, the readers' own epochs: a
torchdata StatefulDataLoader over PackedDataset + ChunkSampler or PackedIterableDataset,
2 workers, on 1 device and on 2 (strategy="ddp"; tests/resume/lightning_resume_child.py says what
each run does). A checkpoint saved on 2 DDP ranks resumes on 1 device: Lightning saves rank
0's loader state only, and the readers' states are a place in the epoch's order, so the
rest of the epoch is read once by the new ranks. On more ranks than saved Lightning ends
the resumed epoch itself, after len(loader) less the batches it had done."""

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

NUM, BATCH, SAVE_EVERY = 61, 4, 3  # as in the child
pytestmark = pytest.mark.frameworks  # Lightning runs its DDP ranks as child processes
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    return pack_wds(tmp_path_factory.mktemp("lightning-resume"), NUM, 16, min_side=8,
                    max_side=12)


def child(devices: int, *args: object) -> list[list[dict[str, Any]]]:
    """The steps each rank of a run of the child trained on."""
    # the child imports tests.framework_support: the clone's root on PYTHONPATH
    path = os.pathsep.join(filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PYTHONPATH": path}
    dataset, out, mode, setup, *ckpt = args
    done = subprocess.run([sys.executable, str(HERE / "lightning_resume_child.py"),
                           *map(str, (dataset, out, mode, setup, devices, *ckpt))],
                          cwd=HERE.parents[1], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return [[json.loads(line) for line in (Path(str(out)) / f"{mode}-rank{rank}.jsonl")
             .read_text().splitlines()] for rank in range(devices)]


def keys(steps: list[dict[str, Any]], epoch: int) -> list[str]:
    return [key for step in steps if step["epoch"] == epoch for key in step["keys"]]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize(("setup", "devices"), [("sampler", 1), ("iterable", 1),
                                                ("iterable", 2)])
def test_fit_from_a_mid_epoch_checkpoint_trains_on_the_rest_once(
        dataset: Path, tmp_path: Path, setup: str, devices: int) -> None:
    stopped = child(devices, dataset, tmp_path, "stop", setup)
    assert all(len(rank) > SAVE_EVERY for rank in stopped), "the stop ends past its checkpoint"
    checkpoint = tmp_path / "ckpt" / f"step={SAVE_EVERY}.ckpt"
    resumed = child(devices, dataset, tmp_path, "resume", setup, checkpoint)
    every = Counter(open_dataset(dataset)[1].keys())
    before = [key for rank in stopped for key in keys(rank[:SAVE_EVERY], 0)]
    assert all([step["batch"] for step in rank][:1] == [SAVE_EVERY] for rank in resumed)
    rest = [key for rank in resumed for key in keys(rank, 0)]
    assert Counter(before) + Counter(rest) == every, f"{setup}: epoch 0 not exactly once"
    assert Counter(key for rank in resumed for key in keys(rank, 1)) == every, setup
    steps = {len([step for step in rank if step["epoch"] == 0]) for rank in resumed}
    assert steps == {-(-NUM // (BATCH * devices)) - SAVE_EVERY}, "the epoch's batches, less"
    if devices == 1:
        from tests.resume.lightning_resume_child import plain_epoch
        assert keys(resumed[0], 1) == plain_epoch(dataset, setup, 1), "Lightning's epoch 1"
        assert before == plain_epoch(dataset, setup, 0)[:len(before)], "and its epoch 0"


def test_a_pass_dropped_before_its_first_index_leaves_its_epoch_to_the_next(
        tmp_path: Path) -> None:
    """torchdata's StatefulDataLoader with workers makes two sampler iterators per pass and
    drops the first: the epoch (and a loaded resume) stay with the pass that is read."""
    from readers import ChunkSampler, PackedDataset, PartitionOptions, loop_state

    ds = PackedDataset(pack_wds(tmp_path, 24, 8, min_side=8, max_side=10), decode="raw")
    sampler = ChunkSampler(ds, partition=PartitionOptions(chunk_size=4, buffer_size=8))
    epochs = []
    for _ in range(3):
        iter(sampler)  # dropped untouched
        epochs.append(list(sampler))
    for epoch, indices in enumerate(epochs):
        sampler.set_epoch(epoch)
        assert list(sampler) == indices, f"epoch {epoch} is the pass that was read"
    assert sampler.state_dict()["epoch"] == 2
    sampler.load_state_dict(loop_state(1, 2, 4, world_size=1))
    iter(sampler)
    assert list(sampler) == epochs[1][8:], "the resume applies to the pass that is read"
    iter(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == epochs[0], "a set_epoch after a dropped pass names the next"
    iter(sampler)
    assert list(sampler) == epochs[1], "a finished pass is not reused"


def exactly_once_across(stopped: list[list[dict[str, Any]]], resumed: list[list[dict[str, Any]]],
                        every: Counter[str]) -> Counter[str]:
    """What the resumed run left unread of epoch 0 (what it read twice fails here)."""
    before = Counter(key for rank in stopped for key in keys(rank[:SAVE_EVERY], 0))
    rest = Counter(key for rank in resumed for key in keys(rank, 0))
    assert not (before + rest) - every, "a sample of epoch 0 trained on twice"
    assert Counter(key for rank in resumed for key in keys(rank, 1)) == every, "epoch 1 whole"
    return every - (before + rest)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("setup", ["sampler", "iterable"])
def test_a_ddp_checkpoint_resumes_on_one_device(dataset: Path, tmp_path: Path,
                                                setup: str) -> None:
    """2 ranks x 2 workers stop after their step-3 checkpoint; `fit(ckpt_path=)` on 1 device
    (2 workers: torchdata keeps num_workers) trains on the rest of epoch 0, each sample
    once, 10 batches of 4 after the 2 x 3 batches before, then on the whole of epoch 1."""
    stopped = child(2, dataset, tmp_path, "stop", setup)
    checkpoint = tmp_path / "ckpt" / f"step={SAVE_EVERY}.ckpt"
    resumed = child(1, dataset, tmp_path, "resume", setup, checkpoint)
    every = Counter(open_dataset(dataset)[1].keys())
    assert not exactly_once_across(stopped, resumed, every), f"{setup}: epoch 0 not all read"
    epoch0 = [step for step in resumed[0] if step["epoch"] == 0]
    assert [step["batch"] for step in epoch0][:1] == [SAVE_EVERY]
    assert len(epoch0) == -(-(NUM - 2 * SAVE_EVERY * BATCH) // BATCH), "the rest, in batches"
    assert not any(step["padded"] for step in epoch0), "1 rank: nothing to even out"
    from tests.resume.lightning_resume_child import plain_epoch
    assert keys(resumed[0], 1) == plain_epoch(dataset, setup, 1), "Lightning's epoch 1"


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_a_one_device_checkpoint_on_two_ranks_ends_where_lightning_counts(
        dataset: Path, tmp_path: Path) -> None:
    """1 device -> 2 DDP ranks: the readers hand each new rank an equal half of the rest,
    each sample once, but Lightning stops the resumed epoch after len(loader) - 3 batches
    (it counts the epoch in batches of its own, restored from the checkpoint), so the
    last batches of the rest go untrained; epoch 1 is whole."""
    stopped = child(1, dataset, tmp_path, "stop", "iterable")
    checkpoint = tmp_path / "ckpt" / f"step={SAVE_EVERY}.ckpt"
    resumed = child(2, dataset, tmp_path, "resume", "iterable", checkpoint)
    left = exactly_once_across(stopped, resumed, Counter(open_dataset(dataset)[1].keys()))
    lightning_steps = -(-NUM // (2 * BATCH)) - SAVE_EVERY  # 8 - 3 per rank
    assert {len([s for s in rank if s["epoch"] == 0]) for rank in resumed} == {lightning_steps}
    rest_per_rank = -(-(NUM - SAVE_EVERY * BATCH) // 2)  # 25: 7 batches, Lightning takes 5
    untrained = 2 * rest_per_rank - 2 * lightning_steps * BATCH  # 10 places, 1 a flagged repeat
    assert sum(left.values()) in (untrained - 1, untrained), "what Lightning leaves out"
