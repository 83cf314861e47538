"""Check a packed dataset against its index (`packer.verify` adds the source comparison).

Every damaged sample is listed (index, key, file, offset, what failed), not only the
first: the user learns which samples a damaged file costs, and `pack verify --repair`
knows which files to rewrite. A file whose size or sha256 is wrong is read sample by
sample in a child interpreter: a damaged LMDB page can crash the process that reads it,
and a crash there becomes one line about the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from packer import formats
from packer.core.index import Index, SampleTable, open_dataset
from packer.errors import PackError
from packer.storage.files import file_problem

__all__ = ["Report", "check_dataset", "scan_samples"]

FIELDS_DAMAGED = "fields digest mismatch"
REPAIR_HINT = "restore it, reconvert, or run `pack verify DST --repair --source SRC`"


@dataclass
class Report:
    """The outcome of `verify`: ok, or a summary `problem` plus every damaged sample
    (`damaged`: index, key, file, offset, reason) and every damaged file."""

    folder: str
    ok: bool = True
    problem: str | None = None
    num_samples: int = 0
    num_shards: int = 0
    checked: list[str] = field(default_factory=list)
    format: str = ""
    damaged: list[dict[str, Any]] = field(default_factory=list)
    damaged_files: dict[str, str] = field(default_factory=dict)  # name -> problem
    repaired: list[str] = field(default_factory=list)  # files `--repair` rewrote

    def fail(self, problem: str) -> Report:
        self.ok = False
        self.problem = problem
        return self


def check_dataset(folder: Path, report: Report) -> tuple[Index, SampleTable]:
    """Re-read every shard and sample of `folder`, listing the damage in `report`; raises
    PackError (the summary) when anything is damaged, and at a damaged index."""
    index, table = open_dataset(folder)
    report.num_samples, report.num_shards = index.num_samples, len(index.shards)
    report.format = index.format
    report.damaged_files = _check_shards(folder, index)
    report.checked.append("shard sizes and sha256")
    if report.damaged_files:
        report.damaged = _scan_in_child(folder, report.damaged_files)
    else:
        report.damaged = _scan_fast(folder, index, table)
    report.checked.append("sample digests and labels" + (" and fields" if index.fields else ""))
    if report.damaged or report.damaged_files:
        raise PackError(summary(folder, report))
    # after the data: a damaged index.json is reported as such
    report.checked += formats.load(index.format).check_kept_files(folder, index)
    return index, table


def summary(folder: Path, report: Report) -> str:
    """One line: the first damaged file (or sample), and how many samples are damaged."""
    count = len(report.damaged)
    samples = f"{count or 'no'} damaged sample{'s' * (count != 1)}"
    if report.damaged:
        first = report.damaged[0]
        samples += (f", the first sample {first['index']} ({first['key']!r}) in "
                     f"{first['file']}: {first['reason']}")
    if report.damaged_files:
        name, problem = next(iter(report.damaged_files.items()))
        return f"{folder / name}: {problem}; {samples}; {REPAIR_HINT}"
    first = report.damaged[0]
    if first["detail"]:  # the reader's own words name the file and the sample
        return f"{first['detail']} ({count} damaged sample{'s' * (count != 1)} in all; " \
            "or run `pack verify DST --repair --source SRC`)"
    return f"{folder / first['file']}: {samples}; {REPAIR_HINT}"


def _check_shards(folder: Path, index: Index) -> dict[str, str]:
    """Each damaged shard's name and what is wrong with it."""
    damaged: dict[str, str] = {}
    for shard in index.shards:
        path = folder / shard.name
        if not path.is_file():
            damaged[shard.name] = "shard is missing"
            continue
        size = path.stat().st_size
        if size != shard.num_bytes:
            damaged[shard.name] = (f"{size} bytes, index says {shard.num_bytes}; the shard "
                                   "is truncated or replaced")
        elif problem := file_problem(path, shard.sha256, shard.pieces):
            damaged[shard.name] = f"{problem}; the shard is damaged or swapped"
    return damaged


def _scan_fast(folder: Path, index: Index, table: SampleTable) -> list[dict[str, Any]]:
    """Large sequential reads while every sample is intact; sample by sample from the
    first failure on (a table patched to fit a damaged shard still fails per sample)."""
    module = formats.load(index.format)
    reader = module.open_reader(folder, index, table)
    try:
        for _ in reader.read_range(0, index.num_samples):
            pass
        if index.fields:  # each sample's field values against their digest
            for i in range(index.num_samples):
                reader.fields(i)
    except Exception:  # any failure: list the damage sample by sample
        reader.close()
        return scan_samples(folder)
    reader.close()  # first: py-lmdb refuses a second open of one environment
    return _label_damage(folder, index, table)


def _scan_in_child(folder: Path, damaged_files: dict[str, str]) -> list[dict[str, Any]]:
    """`scan_samples` in a child interpreter (not a multiprocessing child: that would run
    the caller's main module again); a crash there marks the damaged files."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, (str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH"))))}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(folder), *damaged_files],
                              capture_output=True, text=True, env=env, check=False)
    except OSError:  # no interpreter to start (an embedded Python): read them here
        return scan_samples(folder, list(damaged_files))
    if done.returncode < 0:  # killed by a signal: a damaged page crashed the reader
        for name in damaged_files:
            damaged_files[name] += "; reading its samples crashed the reader"
    if done.returncode != 0:  # a file too damaged to open: its own problem says enough
        return []
    found: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return found


CHILD = ("import json, sys; from pathlib import Path; "
         "from packer.dataset.verify import scan_samples; "
         "print(json.dumps(scan_samples(Path(sys.argv[1]), sys.argv[2:])))")


def scan_samples(folder: Path, shards: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every damaged sample of `folder` (of the shards named `shards` when given: the
    others match their sha256, so their samples match their digests): its data and
    fields read one sample at a time, then its stored labels against the table."""
    index, table = open_dataset(folder)
    numbers = [n for n, shard in enumerate(index.shards) if not shards or shard.name in shards]
    module = formats.load(index.format)
    reader = module.open_reader(folder, index, table)
    # the files of the fields where the format keeps them apart from the data (npy)
    field_files = [name for name in module.side_files(index) if name != module.LABELS_FILE]
    damaged: list[dict[str, Any]] = []
    try:
        for i in _samples_of(index, numbers):
            problem = _sample_problem(reader, i, bool(index.fields))
            if problem is not None:
                reason, detail = problem
                apart = reason == FIELDS_DAMAGED and field_files
                damaged.append(damage(index, table, i, reason,
                                      ", ".join(field_files) if apart else None, detail))
    finally:
        reader.close()
    listed = {entry["index"] for entry in damaged}
    try:
        labelled = _label_damage(folder, index, table, numbers)
    except PackError:  # labels unreadable in a damaged file: its samples are listed
        if not damaged:
            raise
        labelled = []
    return sorted(damaged + [entry for entry in labelled if entry["index"] not in listed],
                  key=lambda entry: int(entry["index"]))


def _sample_problem(reader: Any, i: int, has_fields: bool) -> tuple[str, str] | None:
    """(what failed, the reader's message) for sample i, None when it is intact."""
    try:
        reader.read(i)
    except Exception as exc:  # damage makes a reader raise anything
        return _reason(exc, "digest mismatch"), str(exc)
    if has_fields:
        try:
            reader.fields(i)
        except Exception as exc:
            return _reason(exc, FIELDS_DAMAGED), str(exc)
    return None


def _reason(exc: Exception, digest: str) -> str:
    text = str(exc)
    for word, reason in (("missing", "missing"), ("truncated", "truncated"),
                         ("digest", digest)):
        if word in text:
            return reason
    return f"unreadable ({text})"


def damage(index: Index, table: SampleTable, i: int, reason: str,
           file: str | None = None, detail: str = "") -> dict[str, Any]:
    """One entry of a report's `damaged` list; `detail`: the reader's message."""
    return {"index": i, "key": table.key(i),
            "file": file or index.shards[index.shard_of(i)].name,
            "offset": int(table.offsets[i]), "reason": reason, "detail": detail}


def _samples_of(index: Index, numbers: Sequence[int]) -> Iterator[int]:
    for number in numbers:
        yield from range(int(index.shard_starts[number]), int(index.shard_starts[number + 1]))


def _label_damage(folder: Path, index: Index, table: SampleTable,
                  numbers: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The samples whose stored label differs from the table's. Shards that are separate
    files are read one at a time (only `numbers` when given), so a shard that loses a
    label shifts no other's; one whose labels cannot be read raises when `numbers` is
    None (PackError naming it), else lists its samples."""
    module = formats.load(index.format)  # labels in range: open_dataset checked them
    if module.OPENS_EVERY_SHARD or module.LABELS_FILE:  # one read of every label
        return _differing(index, table, module.read_labels(folder, index), 0,
                          len(table), module.LABELS_FILE)
    damaged: list[dict[str, Any]] = []
    for number in range(len(index.shards)) if numbers is None else numbers:
        shard = index.shards[number]
        start, stop = int(index.shard_starts[number]), int(index.shard_starts[number + 1])
        one = replace(index, shards=(shard,), num_samples=shard.num_samples)
        try:
            stored = module.read_labels(folder, one)
        except PackError as exc:
            if numbers is None:
                raise
            damaged += [damage(index, table, i, "label unreadable (stock tar readers fail "
                               "here)", None, str(exc)) for i in range(start, stop)]
            continue
        damaged += _differing(index, table, stored, start, stop, None)
    return damaged


def _differing(index: Index, table: SampleTable, stored: np.ndarray, start: int, stop: int,
               file: str | None) -> list[dict[str, Any]]:
    """Samples start..stop-1 whose label in `stored` (from sample `start` on) differs."""
    labels = np.asarray(table.labels[start:stop])
    n = min(len(stored), len(labels))
    bad = (np.nonzero(np.asarray(stored[:n]) != labels[:n])[0] + start).tolist()
    bad += list(range(start + n, stop))  # labels missing from the file
    return [damage(index, table, i, "stored label differs from the index", file)
            for i in bad]
