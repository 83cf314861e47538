"""Lightning's own mid-epoch resume, `trainer.fit(model, ckpt_path=...)` from a checkpoint
that `ModelCheckpoint(every_n_train_steps=...)` saved, trains on the rest of that epoch
exactly once, in a new process, then on the whole next epoch in a new order: a torchdata
StatefulDataLoader over PackedDataset + ChunkSampler or PackedIterableDataset, 2 workers
(tests/lightning_resume_child.py says what each run does)."""

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
from tests.helpers import pack_wds

NUM, BATCH, SAVE_EVERY = 61, 4, 3  # as in the child
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    return pack_wds(tmp_path_factory.mktemp("lightning-resume"), NUM, 16, min_side=8,
                    max_side=12)


def child(*args: object) -> list[dict[str, Any]]:
    """The steps a run of the child trained on."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(HERE / "lightning_resume_child.py"),
                           *map(str, args)], cwd=HERE.parent, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out, mode = Path(str(args[1])), args[2]
    return [json.loads(line) for line in (out / f"{mode}.jsonl").read_text().splitlines()]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("setup", ["sampler", "iterable"])
def test_fit_from_a_mid_epoch_checkpoint_trains_on_the_rest_once(dataset: Path, tmp_path: Path,
                                                                 setup: str) -> None:
    stopped = child(dataset, tmp_path, "stop", setup)
    assert len(stopped) > SAVE_EVERY, "the stop run ends past its checkpoint"
    checkpoint = tmp_path / "ckpt" / f"step={SAVE_EVERY}.ckpt"
    resumed = child(dataset, tmp_path, "resume", setup, checkpoint)
    every = Counter(open_dataset(dataset)[1].keys())

    def keys(steps: list[dict[str, Any]], epoch: int) -> list[str]:
        return [key for step in steps if step["epoch"] == epoch for key in step["keys"]]

    before = keys(stopped[:SAVE_EVERY], 0)
    assert [step["batch"] for step in resumed][:1] == [SAVE_EVERY], "the batch count goes on"
    assert Counter(before) + Counter(keys(resumed, 0)) == every, f"{setup}: epoch 0 not once"
    assert Counter(keys(resumed, 1)) == every, f"{setup}: epoch 1 not whole"
    from tests.lightning_resume_child import plain_epoch
    assert keys(resumed, 1) == plain_epoch(dataset, setup, 1), "Lightning's epoch 1 is ours"
    assert before == plain_epoch(dataset, setup, 0)[:len(before)], "and its epoch 0 too"
    steps = len([step for step in resumed if step["epoch"] == 0]) + SAVE_EVERY
    assert steps == -(-NUM // BATCH), "the resumed epoch has the epoch's batches"


def test_a_pass_dropped_before_its_first_index_leaves_its_epoch_to_the_next(
        tmp_path: Path) -> None:
    """torchdata's StatefulDataLoader with workers makes two sampler iterators per pass and
    drops the first: the epoch (and a loaded resume) stay with the pass that is read."""
    from readers import ChunkSampler, PackedDataset, SplitOptions
    from readers.resume import loop_state

    ds = PackedDataset(pack_wds(tmp_path, 24, 8, min_side=8, max_side=10), decode="raw")
    sampler = ChunkSampler(ds, split=SplitOptions(chunk_size=4, buffer_size=8))
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
