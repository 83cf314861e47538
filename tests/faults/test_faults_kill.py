"""Interrupt `pack convert` with SIGKILL and SIGINT at many moments per format, then resume.

Each round is checked by `devtools.faults.kills` (see there): after the interruption the dataset
is complete and verifies, or it is refused as unfinished by `pack info`, open_dataset
and both readers; `--resume` then gives the uninterrupted run's files byte for byte,
with no temporary file left. Half the moments are I/O events (every gap between two
system calls can be hit), half random times; every 4th round interrupts the resume too.

Runs go through a fork server (no 0.5 s interpreter start per run) in a tmpfs when
there is one: fsync is free there, and a killed process leaves the same files in the
page cache either way. The moments come from a fixed seed (tests.helpers.KILL_SEED); replay
a failure with PACKER_KILL_SEED=<seed from the message>. The default tier runs a few rounds
per format and signal, the `soak` tier many (scripts/test --tier soak: hundreds), and
`python scripts/soak.py` hundreds with a fresh seed each run.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.faults.forkserver import ForkServer, Interrupt
from devtools.faults.kills import (
    Case,
    Reference,
    check_resume,
    reference_run,
    run_rounds,
    standard_case,
    temporary_files,
    tree,
)
from packer import ConvertOptions, convert
from packer.conversion.journal import STATE_DIR, Journal
from packer.core.index import INDEX_NAME
from packer.errors import DatasetExistsError, IncompleteDatasetError
from packer.formats.base import ShardOptions
from readers import PackedDataset, PackedIterableDataset
from tests.helpers import FORMATS, KILL_SEED, count_adds, soak_rounds

# Rounds per format and signal: a few in the default tier, many in the soak tier.
ROUNDS = {"few": {signal.SIGKILL: 4, signal.SIGINT: 4},
          "many": {signal.SIGKILL: soak_rounds(30, 300), signal.SIGINT: soak_rounds(20, 150)}}


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="packer-kill-", dir=shm if os.access(shm, os.W_OK)
                                 else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    with ForkServer() as running:
        yield running


@pytest.fixture(scope="module")
def references(server: ForkServer, mixed_src: Path, work: Path) -> dict[str, Reference]:
    out = {}
    for fmt in FORMATS:
        (work / fmt).mkdir()
        out[fmt] = reference_run(server, standard_case(mixed_src, fmt), work / fmt)
    return out


def readers_refuse(dst: Path) -> None:
    for make in (PackedDataset, PackedIterableDataset):
        with pytest.raises(IncompleteDatasetError, match=r"did not finish|no such dataset"):
            make(dst)


@pytest.mark.timeout(soak_rounds(240, 2400))
@pytest.mark.parametrize("depth", ["few", pytest.param("many", marks=pytest.mark.soak)])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT],
                         ids=lambda s: signal.Signals(s).name)
def test_interrupted_conversions_resume_byte_identical(
        fmt: str, signum: int, depth: str, server: ForkServer, mixed_src: Path, work: Path,
        references: dict[str, Reference]) -> None:
    rounds = ROUNDS[depth][signum]
    figures = run_rounds(server, standard_case(mixed_src, fmt), references[fmt], work / fmt,
                         rounds, signum, f"{KILL_SEED}:{fmt}", check_refused=readers_refuse)
    print(figures)
    assert not figures.failures, "\n".join(figures.failures[:3])
    assert figures.identical == figures.rounds == rounds
    assert figures.landed >= rounds // 2, "most interruptions must stop a running conversion"
    assert figures.refused >= rounds // 4


def test_a_successful_run_leaves_no_temporary_files(references: dict[str, Reference],
                                                    fmt: str) -> None:
    listing = references[fmt].tree
    assert INDEX_NAME in listing and not temporary_files(listing)
    assert not [name for name in listing if name.startswith(".")]


# ------------------------------------------------------ killed after index.json was written


def first_complete_event(server: ForkServer, case: Case, dst: Path, events: int) -> int:
    """The first I/O event at which a SIGKILL leaves index.json behind (bisected: once
    index.json is renamed into place it stays)."""
    def complete_after_kill(event: int) -> bool:
        shutil.rmtree(dst, ignore_errors=True)
        server.run(case.argv(dst, workers=0), dst.with_name("bisect.log"),
                   Interrupt(signal.SIGKILL, at_event=event), dict(case.patches))
        return (dst / INDEX_NAME).exists()

    low, high = 1, events + 1  # a kill at `high` never comes: the run completes
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if complete_after_kill(middle) else (middle + 1, high)
    return low


@pytest.mark.timeout(120)
def test_resume_after_a_kill_that_came_after_the_index(
        fmt: str, server: ForkServer, mixed_src: Path, work: Path,
        references: dict[str, Reference]) -> None:
    """A job scheduler re-running a step killed right after its last rename: a retry with
    --resume says "nothing to resume", exits 0 and leaves the uninterrupted run's files."""
    case, reference = standard_case(mixed_src, fmt), references[fmt]
    dst = work / fmt / "after-index" / "out"  # as the reference: wds shards carry the name
    dst.parent.mkdir(parents=True)
    first = first_complete_event(server, case, dst, reference.events)
    assert first <= reference.events, "the run ends with the removal of its resume state"
    for event in sorted({first, (first + reference.events) // 2, reference.events}):
        shutil.rmtree(dst, ignore_errors=True)
        killed = server.run(case.argv(dst, workers=0), dst.with_name("killed.log"),
                            Interrupt(signal.SIGKILL, at_event=event), dict(case.patches))
        assert killed.returncode == -signal.SIGKILL and (dst / INDEX_NAME).exists()
        check_resume(server, case, dst, dst.with_name("resume.log"), 0, dict(case.patches))
        assert tree(dst) == reference.tree, f"kill at I/O event {event} of {reference.events}"

RUN = ConvertOptions(shards=ShardOptions(max_samples=6), workers=0)


def complete_with_state(src: Path, dst: Path, monkeypatch: pytest.MonkeyPatch,
                        keep_job: bool = True) -> None:
    """A complete dataset whose run died before its resume state was removed."""
    with monkeypatch.context() as patch:
        patch.setattr(Journal, "remove", lambda self: None)
        convert(src, dst, "wds", run=RUN)
    assert (dst / STATE_DIR / "job.json").exists()
    if not keep_job:  # the removal got as far as its last file
        (dst / STATE_DIR / "job.json").unlink()


@pytest.mark.parametrize("keep_job", [True, False])
def test_resume_finishes_the_clean_up_of_a_complete_dataset(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        keep_job: bool) -> None:
    convert(mixed_src, tmp_path / "ref" / "out", "wds", run=RUN)
    dst = tmp_path / "out"
    complete_with_state(mixed_src, dst, monkeypatch, keep_job)
    with pytest.raises(DatasetExistsError, match="--overwrite"):
        convert(mixed_src, dst, "wds", run=RUN)  # without --resume: refused, untouched
    assert (dst / STATE_DIR).exists()
    index = convert(mixed_src, dst, "wds", run=ConvertOptions(
        shards=RUN.shards, workers=0, resume=True))
    assert index.num_samples == 40
    assert tree(dst) == tree(tmp_path / "ref" / "out")


def test_resume_with_other_options_keeps_a_complete_dataset(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out"
    complete_with_state(mixed_src, dst, monkeypatch)
    before = tree(dst)
    other = ConvertOptions(shards=ShardOptions(max_samples=7), workers=0, resume=True)
    with pytest.raises(DatasetExistsError, match="other options"):
        convert(mixed_src, dst, "wds", run=other)
    assert tree(dst) == before


def test_journal_removal_deletes_the_job_record_last(mixed_src: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out"
    complete_with_state(mixed_src, dst, monkeypatch)
    removed: list[str] = []
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        removed.append(self.name)
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    Journal(dst).remove()
    assert len(removed) > 3 and removed[-1] == "job.json"
    assert not (dst / STATE_DIR).exists()


@pytest.mark.parametrize("line", ['{"part": 1, "shards": "x"}', "[1, 2]", '{"part": 1}',
                                  '{"part": 1, "src_stop": 6, "num_samples": 6, "shards": '
                                  '[{"name": 5}], "rejects": []}'])
def test_a_damaged_journal_line_ends_what_resume_keeps(mixed_src: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       line: str) -> None:
    convert(mixed_src, tmp_path / "ref" / "out", "wds", run=RUN)
    dst = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=20):
        convert(mixed_src, dst, "wds", run=RUN)
    journal = dst / STATE_DIR / "parts.jsonl"
    lines = journal.read_text().splitlines()
    assert len(lines) >= 3
    journal.write_text("\n".join([lines[0], line, *lines[2:]]) + "\n")
    with count_adds(monkeypatch, "wds") as adds:
        convert(mixed_src, dst, "wds", run=ConvertOptions(shards=RUN.shards, workers=0,
                                                          resume=True))
    assert adds[0] == 40 - 6  # only the first part (6 samples) was kept
    assert tree(dst) == tree(tmp_path / "ref" / "out")
