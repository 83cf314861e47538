"""Rounds of interrupted conversions and the checks after each (tests, scripts/soak.py).

A round converts SRC into a fresh DST and interrupts it (SIGKILL, or SIGINT as Ctrl-C
sends it) at one moment from `devtools.faults.forkserver`; in some rounds the `--resume` that
follows is interrupted too. After every interruption:

  - no traceback; a SIGINT ends within MAX_EXIT_S with exit 130 and a --resume hint
    once the conversion has state (just "interrupted" in click's start-up; 1 and
    click's "Aborted!" while it parses options; death by SIGINT before `pack` starts,
    as in an interpreter still importing)
  - index.json present: `verify(DST, SRC)` passes (the dataset is complete)
  - index.json absent: `pack info` exits 1 with "did not finish" and opening the
    dataset (what the readers do first) raises IncompleteDatasetError

Then `--resume` runs uninterrupted (on a complete DST too: it must say "nothing to
resume" and exit 0) and DST must equal an uninterrupted run file for file and byte for
byte, hidden files included: no `.partial` file and no `.pack-state` folder is left.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devtools.faults.forkserver import ForkServer, Interrupt, Outcome
from packer.api import verify
from packer.conversion.journal import STATE_DIR
from packer.core.index import INDEX_NAME, open_dataset
from packer.errors import IncompleteDatasetError

MAX_EXIT_S = 10.0
CHAIN_EVERY = 4  # every 4th round also interrupts its first --resume


@dataclass(frozen=True)
class Case:
    """What to convert: `pack convert SRC DST --to FMT ARGS...`, with test-only patches."""

    src: Path
    fmt: str
    args: tuple[str, ...] = ()
    patches: tuple[tuple[str, int], ...] = ()

    def argv(self, dst: Path, workers: int, resume: bool = False) -> list[str]:
        return ["convert", str(self.src), str(dst), "--to", self.fmt, "--workers",
                str(workers), "-q", *self.args, *(["--resume"] if resume else [])]


def standard_case(src: Path, fmt: str) -> Case:
    """Several parts per format where it has parts, so a resume keeps some and redoes some."""
    if fmt == "wds":
        return Case(src, fmt, ("--shard-samples", "6"))
    if fmt == "npy":
        return Case(src, fmt, ("--size", "16x16"), (("packer.formats._npy.PART_SAMPLES", 4),))
    return Case(src, fmt)


def make_kill_source(root: Path) -> Path:
    """40 small images in 3 classes plus two bad inputs (rejects survive resumes too)."""
    from packer.testing import make_sample_folder

    src = make_sample_folder(root, count=40, classes=3, min_side=40, max_side=96, seed=7)
    (src / "class_01" / "img_000013_empty.jpg").write_bytes(b"")
    (src / "class_02" / "img_000026_text.jpg").write_text("not an image\n")
    return src


@dataclass
class Figures:
    """What a series of rounds showed."""

    fmt: str
    signal: str
    rounds: int = 0
    sent: int = 0  # interruptions sent
    landed: int = 0  # ...that stopped a running conversion
    complete: int = 0  # after one: index.json present and verify passed
    refused: int = 0  # after one: no index.json, info and open refused
    identical: int = 0  # rounds that ended byte-identical to an uninterrupted run
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run: its files, I/O event count and duration."""

    tree: dict[str, str]
    events: int
    seconds: float


def tree(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below `folder`, hidden ones included."""
    out: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        rel = str(path.relative_to(folder))
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(mode) \
            else "dir" if stat.S_ISDIR(mode) else f"special:{stat.S_IFMT(mode)}"
    return out


def temporary_files(listing: dict[str, str]) -> list[str]:
    return [name for name in listing if name.endswith(".partial") or STATE_DIR in name]


def reference_run(server: ForkServer, case: Case, work: Path) -> Reference:
    """Convert uninterrupted (twice: the second run's timing is warm), into a folder
    named as the rounds' DST (`out`): wds shards carry the name."""
    dst = work / "reference" / "out"
    for _ in range(2):
        shutil.rmtree(dst, ignore_errors=True)
        outcome = server.run(case.argv(dst, workers=0), work / "reference.log",
                             patches=dict(case.patches))
        if outcome.returncode != 0:
            raise RuntimeError(f"uninterrupted run failed: {outcome.log}")
    listing = tree(dst)
    left = temporary_files(listing)
    if left:
        raise RuntimeError(f"a successful run left temporary files: {left}")
    return Reference(listing, outcome.events, outcome.seconds)


def plan(rounds: int, reference: Reference, signum: int, seed: str) -> list[list[Interrupt]]:
    """Moments spread over the run: even rounds at I/O events, odd ones after a delay.

    Stratified: round pairs split the run into equal slices and each picks a random
    point in its slice, so the kill points cover the whole run evenly.
    """
    rng = random.Random(seed)
    slices = max(1, (rounds + 1) // 2)
    chains = []
    for number in range(rounds):
        where = (number // 2 + rng.random()) / slices
        first = Interrupt(signum, at_event=1 + int(where * reference.events)) if number % 2 == 0 \
            else Interrupt(signum, after_s=where * 1.1 * reference.seconds)
        chain = [first]
        if number % CHAIN_EVERY == CHAIN_EVERY - 1:
            chain.append(Interrupt(signum, after_s=rng.uniform(0, reference.seconds)))
        chains.append(chain)
    return chains


def run_rounds(server: ForkServer, case: Case, reference: Reference, work: Path, rounds: int,
               signum: int, seed: str,
               check_refused: Callable[[Path], None] | None = None) -> Figures:
    """Interrupt `rounds` conversions; failures are listed, not raised."""
    figures = Figures(case.fmt, signal.Signals(signum).name)
    for number, chain in enumerate(plan(rounds, reference, signum, seed)):
        figures.rounds += 1
        where = f"{case.fmt} {figures.signal} round {number} (seed {seed!r})"
        try:
            _round(server, case, reference, work / "out", chain, figures, number % 4 >= 2,
                   check_refused)
        except (RoundFailed, AssertionError) as exc:  # AssertionError: from check_refused
            figures.failures.append(f"{where}: {exc}")
        else:
            figures.identical += 1
    return figures


class RoundFailed(Exception):
    """A promise did not hold after an interruption."""


def _round(server: ForkServer, case: Case, reference: Reference, dst: Path,
           chain: list[Interrupt], figures: Figures, threads: bool,
           check_refused: Callable[[Path], None] | None) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    log = dst.with_name("round.log")
    workers = 2 if threads else 0
    patches = dict(case.patches)
    for attempt, interrupt in enumerate(chain):
        if attempt and not _needs_resume(dst):
            break
        outcome = server.run(case.argv(dst, workers, resume=attempt > 0), log, interrupt,
                             patches)
        figures.sent += 1
        figures.landed += outcome.returncode != 0
        _check_after(server, case, dst, interrupt, outcome, figures, check_refused)
    check_resume(server, case, dst, log, workers, patches)
    listing = tree(dst)
    if listing != reference.tree:
        extra = sorted(set(listing) - set(reference.tree))
        differ = sorted(k for k in reference.tree if listing.get(k) != reference.tree[k])
        raise RoundFailed(f"differs from the uninterrupted run: extra {extra}, "
                          f"missing or changed {differ}")


def check_resume(server: ForkServer, case: Case, dst: Path, log: Path, workers: int,
                 patches: dict[str, int]) -> None:
    """`--resume`, uninterrupted, must succeed, whatever the interruption left: on a
    complete DST (the kill came after index.json) it says there is nothing to resume."""
    complete = (dst / INDEX_NAME).exists()
    outcome = server.run(case.argv(dst, workers, resume=True), log, patches=patches)
    if outcome.returncode != 0:
        raise RoundFailed(f"--resume failed with {outcome.returncode}: {outcome.log}")
    if complete and "nothing to resume" not in outcome.log:
        raise RoundFailed(f"--resume of a complete DST did not say so: {outcome.log}")


def _needs_resume(dst: Path) -> bool:
    return not (dst / INDEX_NAME).exists() or (dst / STATE_DIR).exists()


def _check_after(server: ForkServer, case: Case, dst: Path, interrupt: Interrupt,
                 outcome: Outcome, figures: Figures,
                 check_refused: Callable[[Path], None] | None) -> None:
    if "Traceback" in outcome.log:
        raise RoundFailed(f"traceback:\n{outcome.log}")
    if interrupt.signum == signal.SIGINT:
        _check_sigint(outcome, started=(dst / STATE_DIR).exists())
    elif outcome.returncode not in (0, -signal.SIGKILL):
        raise RoundFailed(f"exit {outcome.returncode}: {outcome.log}")
    if (dst / INDEX_NAME).exists():
        report = verify(dst, case.src)
        if not report.ok:
            raise RoundFailed(f"index.json present but verify fails: {report.problem}")
        figures.complete += 1
        return
    info = server.run(["info", str(dst)], dst.with_name("info.log"))
    if info.returncode != 1 or not any(words in info.log for words in
                                       ("did not finish", "no such dataset folder")):
        raise RoundFailed(f"pack info on the unfinished DST: {info.returncode} {info.log}")
    try:
        open_dataset(dst)
    except IncompleteDatasetError:
        pass
    else:
        raise RoundFailed("open_dataset accepted an unfinished dataset")
    if check_refused is not None and dst.exists():
        check_refused(dst)
    figures.refused += 1


def _check_sigint(outcome: Outcome, started: bool) -> None:
    """Exit promptly, quietly; with a --resume hint once the conversion has state."""
    if outcome.exit_after_signal_s is not None and outcome.exit_after_signal_s > MAX_EXIT_S:
        raise RoundFailed(f"took {outcome.exit_after_signal_s:.1f} s to exit after SIGINT; "
                          f"its log:\n{outcome.log[-6000:]}")
    hint = "--resume" if started else "interrupted"
    if outcome.returncode == 130 and hint not in outcome.log:
        raise RoundFailed(f"exit 130 without {hint!r}: {outcome.log}")
    if outcome.returncode not in (0, 1, 130, -signal.SIGINT):  # -2: before it started
        raise RoundFailed(f"exit {outcome.returncode} after SIGINT: {outcome.log}")
    if outcome.returncode == 1 and "Aborted!" not in outcome.log:
        raise RoundFailed(f"exit 1 after SIGINT: {outcome.log}")
