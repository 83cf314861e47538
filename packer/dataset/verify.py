"""Check a packed dataset against its index (`packer.dataset.verify` adds the source comparison).

Stops at the first problem and names the file (and sample) so the user knows what to
restore or reconvert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packer import formats
from packer.core.index import Index, SampleTable, open_dataset
from packer.errors import PackError
from packer.storage.pieces import file_problem

__all__ = ["Report", "check_dataset"]


@dataclass
class Report:
    """The outcome of `verify`: ok, or the first problem found."""

    folder: str
    ok: bool = True
    problem: str | None = None
    num_samples: int = 0
    num_shards: int = 0
    checked: list[str] = field(default_factory=list)
    format: str = ""

    def fail(self, problem: str) -> Report:
        self.ok = False
        self.problem = problem
        return self


def check_dataset(folder: Path, report: Report) -> tuple[Index, SampleTable]:
    """Re-read every shard and sample of `folder`; raises PackError at the first problem."""
    index, table = open_dataset(folder)
    report.num_samples, report.num_shards = index.num_samples, len(index.shards)
    report.format = index.format
    _check_shards(folder, index)
    report.checked.append("shard sizes and sha256")
    _check_samples(folder, index, table)
    report.checked.append("sample digests and labels" + (" and fields" if index.fields else ""))
    # after the data: a damaged index.json is reported as such
    report.checked += formats.load(index.format).check_kept_files(folder, index)
    return index, table


def _check_shards(folder: Path, index: Index) -> None:
    for shard in index.shards:
        path = folder / shard.name
        if not path.is_file():
            raise PackError(f"{path}: shard is missing; restore it or reconvert")
        size = path.stat().st_size
        if size != shard.num_bytes:
            raise PackError(f"{path}: {size} bytes, index says {shard.num_bytes}; "
                            "the shard is truncated or replaced, restore it or reconvert")
        if problem := file_problem(path, shard.sha256, shard.pieces):
            raise PackError(f"{path}: {problem}; the shard is damaged or swapped, restore it "
                            "or reconvert")


def _check_samples(folder: Path, index: Index, table: SampleTable) -> None:
    module = formats.load(index.format)
    reader = module.open_reader(folder, index, table)
    try:
        for _ in reader.read_range(0, index.num_samples):
            pass
        if index.fields:  # each sample's field values against their digest
            for i in range(index.num_samples):
                reader.fields(i)
    finally:
        reader.close()  # first: py-lmdb refuses a second open of one environment
    stored = module.read_labels(folder, index)
    labels = np.asarray(table.labels)
    if len(stored) != len(labels) or not np.array_equal(stored, labels):
        bad = _first_difference(stored, labels)
        labels_file = module.LABELS_FILE  # npy keeps labels beside the data
        where = folder / (labels_file or index.shards[index.shard_of(bad)].name)
        raise PackError(f"{where}: stored label of sample {bad} ({table.key(bad)!r}) differs "
                        "from the index; restore the file or reconvert")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(index.class_names)):
        raise PackError(f"{folder}: a label is outside the {len(index.class_names)} classes")


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(diff[0]) if len(diff) else n - 1 if n else 0


