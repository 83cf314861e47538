"""transformers' Trainer resumes a checkpoint saved mid-epoch (`save_steps`) with
`trainer.train(resume_from_checkpoint=...)` in a new torchrun job of 2 processes: the rest
of that epoch exactly once, then the whole next epoch, and the batches the Trainer skips
are never read or decoded: map-style with a ChunkSampler (Accelerate skips index batches),
an IterableDataset under dispatch_batches and under its shards (the Trainer's
`get_resumed_dataloader` is readers.skip_first_batches, transformers 5.25 or newer: the
reader starts at the position; tests/resume/trainer_resume_child.py says what each run
does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from packer.core.index import open_dataset
from tests.helpers import free_port, pack_wds

NUM, RANKS, BATCH, SAVE_EVERY = 80, 2, 4, 3  # 80: no padding by accelerate's even_batches
pytestmark = pytest.mark.frameworks  # transformers' Trainer runs in child processes
HERE = Path(__file__).parent
SKIPPED = SAVE_EVERY * BATCH * RANKS  # samples of the epoch trained on before the checkpoint
# samples each rank would decode again for the skip: rank 0 reads all under dispatch (the
# workers rank 1 starts there only prefetch, a count that depends on timing: None)
SKIP_DECODES: dict[str, list[int | None]] = {
    "map": [SAVE_EVERY * BATCH] * RANKS, "iterable": [SKIPPED, None],
    "iterable_shards": [SKIPPED] * RANKS}


def torchrun(dataset: Path, out: Path, *args: str) -> None:
    # the child imports tests.framework_support: the clone's root on PYTHONPATH
    path = os.pathsep.join(filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "PYTHONWARNINGS": "ignore",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
               f"--master_port={free_port()}", str(HERE / "trainer_resume_child.py"),
               str(dataset), str(out), *args]
    done = subprocess.run(command, cwd=HERE.parents[1], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
                    < (2, 6), reason="transformers loads a Trainer checkpoint only with torch "
                                     "2.6 or newer (its CVE-2025-32434 rule)")
def test_trainer_resumes_the_rest_of_an_epoch_once_without_decoding_the_skip(
        tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    hook = hasattr(transformers.Trainer, "get_resumed_dataloader")  # else the skip is read
    dataset = pack_wds(tmp_path, NUM, 16, min_side=8, max_side=12)
    out = tmp_path / "runs"
    out.mkdir()
    torchrun(dataset, out, "stop")
    torchrun(dataset, out, "resume", f"checkpoint-{SAVE_EVERY}")
    every = Counter(open_dataset(dataset)[1].keys())
    for setup, skip_decodes in SKIP_DECODES.items():
        folder = out / setup
        before = [key for r in range(RANKS)
                  for key in json.loads((folder / f"stop-rank{r}.json").read_text())]
        assert len(before) == SKIPPED, setup
        epochs = [[json.loads((folder / f"resume-rank{r}-epoch{e}.json").read_text())
                   for r in range(RANKS)] for e in (0, 1)]
        rest = [key for rank in epochs[0] for key in rank["keys"]]
        assert Counter(before) + Counter(rest) == every, f"{setup}: epoch 0 not exactly once"
        assert Counter(key for rank in epochs[1] for key in rank["keys"]) == every, setup
        assert len({len(rank["keys"]) for rank in epochs[0]}) == 1, f"{setup}: uneven ranks"
        for rank, skipped in enumerate(skip_decodes):
            resumed, whole = epochs[0][rank]["decodes"], epochs[1][rank]["decodes"]
            if not hook and setup != "map":
                continue
            assert skipped is None or resumed == whole - skipped, (
                f"{setup}, rank {rank}: the resumed epoch decoded {resumed}, a whole one "
                f"{whole}: the skipped batches were read again")
