"""The benchmark suite of issue 2: cases, targets, interleaved runs, a markdown table.

Targets were quoted on a 2-core machine next to baselines measured there (stock
ShardWriter ~7,000/s, `tar cf` ~39,000/s, a PIL loop ~490/s). This machine may be
slower or busier, so each target is judged twice: as the absolute number, and as the
same ratio to the baseline measured in this run (the fair one on a shared machine).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from devtools.bench import peers
from devtools.bench.pack import Case, Timing, run_ours, run_pil_loop, run_shardwriter, run_tar

QUOTED = {"shardwriter": 7000.0, "tar": 39000.0, "pil": 490.0}
BASELINE_NAMES = {"shardwriter": "stock webdataset.ShardWriter (same bytes)",
                  "tar": "tar cf (same files)", "pil": "plain PIL loop -> memmap, 224x224",
                  "litdata": "litdata.optimize (same bytes, a process per core)",
                  "mosaic": "mosaicml-streaming MDSWriter (same bytes)"}
NPY_SIZE = (224, 224)


@dataclass(frozen=True)
class Target:
    """At least `per_s` images/s, or equivalently `ratio` x the named baseline."""

    per_s: float
    baseline: str
    ratio: float


def target_of(case: Case) -> Target:
    if case.size is not None:
        return Target(2500.0, "pil", 5.0)
    if case.check == "none":
        return Target(25000.0, "shardwriter", 25000.0 / QUOTED["shardwriter"])
    return Target(7000.0, "shardwriter", 7000.0 / QUOTED["shardwriter"])


def cases_for(formats: list[str]) -> list[Case]:
    cases = [Case(fmt, "none") for fmt in formats if fmt != "npy"]
    cases += [Case(fmt, "decode") for fmt in formats if fmt != "npy"]
    if "npy" in formats:
        cases.append(Case("npy", size=NPY_SIZE))
    return cases


@dataclass
class Results:
    """Images/s and CPU µs per image of every run, per case name and baseline key."""

    count: int
    runs: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, timing: Timing) -> None:
        self.runs.setdefault(name, []).append(self.count / timing.wall)
        self.cpu.setdefault(name, []).append(timing.cpu / self.count * 1e6)

    def median(self, name: str) -> float:
        return statistics.median(self.runs[name])

    def cpu_us(self, name: str) -> float:
        return statistics.median(self.cpu[name])

    def ceiling(self, name: str, cores: int) -> float:
        """Images/s if the run had `cores` idle cores and scaled perfectly on them."""
        return cores * 1e6 / self.cpu_us(name)


def run_suite(src: Path, work: Path, count: int, cases: list[Case], runs: int,
              log: Callable[[str], None]) -> Results:
    """Interleave baselines and our cases `runs` times, so drift hits all alike."""
    results = Results(count)
    baselines: dict[str, Callable[[], Timing]] = {
        "shardwriter": lambda: run_shardwriter(src, work / "shardwriter"),
        "tar": lambda: run_tar(src, work / "baseline.tar"),
    }
    for peer in (p for p in peers.PEERS if peers.missing(p) is None):
        baselines[peer] = partial(peers.timed_write, peer, src, work / f"peer-{peer}")
    if any(case.size for case in cases):
        baselines["pil"] = lambda: run_pil_loop(src, work / "pil.npy", NPY_SIZE)
    for number in range(runs):
        for key, action in baselines.items():
            results.add(key, action())
            log(f"run {number + 1}/{runs}: {key} {results.runs[key][-1]:,.0f}/s")
        for case in cases:
            results.add(case.name, run_ours(case, src, work / "ours"))
            log(f"run {number + 1}/{runs}: {case.name} {results.runs[case.name][-1]:,.0f}/s")
    return results


def speed_table(results: Results, cases: list[Case], cores: int) -> str:
    """Markdown: our cases against their targets, then the baselines.

    "ceiling" is images/s from CPU time alone (ours on `cores` cores, each baseline on
    the one core it can use): what an idle machine would allow, at best.
    """
    lines = ["| case | images/s (median) | CPU µs/image | ratio to baseline | target "
             "| met: absolute | met: as ratio | ceiling: images/s, ratio |",
             "|---|---:|---:|---|---|---|---|---|"]
    for case in cases:
        target = target_of(case)
        ours, base = results.median(case.name), results.median(target.baseline)
        extra = "".join(f"; {ours / results.median(key):.2f}x {key}"
                        for key in ("tar", "litdata", "mosaic")
                        if case.size is None and key in results.runs)
        ceiling = results.ceiling(case.name, cores)
        lines.append(
            f"| {case.name} | {ours:,.0f} | {results.cpu_us(case.name):,.0f} "
            f"| {ours / base:.2f}x {target.baseline}{extra} "
            f"| >= {target.per_s:,.0f}/s (= {target.ratio:.2f}x {target.baseline}) "
            f"| {_yes(ours >= target.per_s)} | {_yes(ours / base >= target.ratio)} "
            f"| {ceiling:,.0f}, {ceiling / results.ceiling(target.baseline, 1):.2f}x |"
        )
    for key, name in BASELINE_NAMES.items():
        if key in results.runs:
            quoted = f"quoted ~{QUOTED[key]:,.0f}/s" if key in QUOTED else ""
            lines.append(f"| baseline: {name} | {results.median(key):,.0f} "
                         f"| {results.cpu_us(key):,.0f} | | {quoted} "
                         f"| | | {results.ceiling(key, 1):,.0f} |")
    lines += [f"\n{note}" for note in (peers.missing(p) for p in peers.PEERS) if note]
    return "\n".join(lines)


def memory_table(rows: list[tuple[str, int, int, int, int]]) -> str:
    """Markdown: (conversion, N, bytes at N, 10N, bytes at 10N) against the 1.5x target."""
    lines = ["| conversion | N | peak RSS | 10N | peak RSS | ratio | target | met |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for name, small, small_rss, large, large_rss in rows:
        ratio = large_rss / small_rss
        lines.append(f"| {name} | {small:,} | {small_rss / 2**20:,.0f} MiB | {large:,} "
                     f"| {large_rss / 2**20:,.0f} MiB | {ratio:.2f}x | <= 1.5x "
                     f"| {_yes(ratio <= 1.5)} |")
    return "\n".join(lines)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"
