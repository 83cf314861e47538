"""An append interrupted at any moment: DST is the old complete dataset (or, inside the
commit's renames, refused until `--resume`), a plain rerun refuses with the resume
hint, and `--resume` gives the uninterrupted append's files byte for byte.

Moments: every os.replace, every os.fsync and every record the writer takes (a failure
raised there),
and SIGKILLs of a `pack append` process at moments drawn from a fixed seed
(tests.helpers.KILL_SEED): a few rounds in the default tier, more in the `soak` tier."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from packer import append, verify
from packer.conversion.append import AppendInterrupted
from packer.conversion.writing import WriterLoop
from packer.core.index import INDEX_NAME
from packer.errors import PackError
from tests.append_support import make_sources, pack, samples
from tests.helpers import FORMATS, KILL_SEED, soak_rounds, tree_hashes

KILL_ROUNDS = {"few": 2, "many": soak_rounds(6, 60)}  # per format: default tier, soak tier


class Injected(Exception):
    """The failure a test raises inside an append."""


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_sources(tmp_path_factory.mktemp("append-faults"))


@pytest.fixture(scope="module")
def cases(sources: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, tuple[Path, Path]]:
    """Per format: (the base dataset, the base grown by an uninterrupted append)."""
    root = tmp_path_factory.mktemp("append-ref")
    out = {}
    for fmt in FORMATS:
        base = root / fmt / f"ds.{fmt}"
        pack(sources[0], base, fmt)
        grown = root / fmt / "grown" / f"ds.{fmt}"
        shutil.copytree(base, grown)
        append(sources[1], grown, workers=0)
        out[fmt] = (base, grown)
    return out


def check_after_interruption(dst: Path, base: Path, grown: Path, union: Path) -> None:
    """The state an interruption leaves, then the rerun without and with --resume."""
    if (dst / ".pack-append").exists():
        if not (dst / ".pack-append" / "commit.json").exists():  # undecided: the old one
            _assert_old(dst, base)
        with pytest.raises(AppendInterrupted, match="an append was interrupted: rerun "
                                                    "with --resume"):
            append(union, dst, workers=0)
        append(union, dst, workers=0, resume=True)
    elif (dst / INDEX_NAME).read_bytes() != (grown / INDEX_NAME).read_bytes():
        _assert_old(dst, base)  # stopped before it wrote anything
    append(union, dst, workers=0)  # complete: a no-op; stopped early: the whole append
    assert tree_hashes(dst) == tree_hashes(grown)


def _assert_old(dst: Path, base: Path) -> None:
    report = verify(dst, None)
    assert report.ok, report.problem
    assert samples(dst) == samples(base)


def _fresh(base: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name / base.name
    shutil.copytree(base, dst)
    return dst


@pytest.mark.parametrize("call", ["replace", "fsync"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_failure_at_every_rename_and_fsync(fmt: str, call: str,
                                           cases: dict[str, tuple[Path, Path]],
                                           sources: tuple[Path, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every os.replace and os.fsync of an append fails in turn (the fsyncs mark every
    step of the commit, npy's growth in place among them)."""
    base, grown = cases[fmt]
    real = getattr(os, call)
    calls = [0]

    def counted(*args: object) -> object:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(os, call, counted)
    append(sources[1], _fresh(base, tmp_path, "count"), workers=0)
    total = calls[0]
    assert total > 5
    for moment in range(total):
        dst = _fresh(base, tmp_path, f"at{moment}")
        calls[0] = 0

        def failing(*args: object, moment: int = moment) -> object:
            if calls[0] == moment:
                raise Injected(f"os.{call} number {moment}")
            calls[0] += 1
            return real(*args)

        monkeypatch.setattr(os, call, failing)
        with pytest.raises((Injected, PackError)):
            append(sources[1], dst, workers=0)
        monkeypatch.setattr(os, call, real)
        check_after_interruption(dst, base, grown, sources[1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_failure_while_encoding(fmt: str, cases: dict[str, tuple[Path, Path]],
                                sources: tuple[Path, Path], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    base, grown = cases[fmt]
    real = WriterLoop.add
    for moment in (0, 5, 9, 17):
        dst = _fresh(base, tmp_path, f"at{moment}")
        taken = [0]

        def failing(loop: WriterLoop, record: object, moment: int = moment,
                    taken: list[int] = taken) -> None:
            if taken[0] == moment:
                raise Injected(f"record number {moment}")
            taken[0] += 1
            real(loop, record)  # type: ignore[arg-type]

        monkeypatch.setattr(WriterLoop, "add", failing)
        with pytest.raises(Injected):
            append(sources[1], dst, workers=0)
        monkeypatch.setattr(WriterLoop, "add", real)
        check_after_interruption(dst, base, grown, sources[1])


IMPORTS = "import packer.api, packer.conversion.append.merge, lmdb, h5py, PIL.Image"
APPEND = "import sys; from packer import append; append(sys.argv[1], sys.argv[2], workers=0)"


@pytest.mark.timeout(soak_rounds(300, 3000))
@pytest.mark.parametrize("depth", ["few", pytest.param("many", marks=pytest.mark.soak)])
@pytest.mark.parametrize("fmt", FORMATS)
def test_sigkill_at_random_moments(fmt: str, depth: str, cases: dict[str, tuple[Path, Path]],
                                   sources: tuple[Path, Path], tmp_path: Path) -> None:
    base, grown = cases[fmt]
    rng = random.Random(f"{KILL_SEED}-{fmt}-{depth}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", APPEND, str(sources[1])]
    started = time.monotonic()
    imports = IMPORTS + (", torch" if fmt == "npy" else "")  # npy resizes with torch
    subprocess.run([sys.executable, "-c", imports], env=env, check=True)
    ready = time.monotonic() - started  # the kills land after the start-up, in the append
    started = time.monotonic()
    subprocess.run([*command, str(_fresh(base, tmp_path, "timed"))], env=env, check=True)
    took = time.monotonic() - started
    for round_ in range(KILL_ROUNDS[depth]):
        dst = _fresh(base, tmp_path, f"round{round_}")
        proc = subprocess.Popen([*command, str(dst)], env=env)
        delay = rng.uniform(min(ready, 0.9 * took), took)
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        try:
            check_after_interruption(dst, base, grown, sources[1])
        except AssertionError as exc:
            raise AssertionError(f"round {round_}, kill at {delay:.3f}s; replay with "
                                 f"PACKER_KILL_SEED={KILL_SEED}") from exc
