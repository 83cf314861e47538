"""Check a packed dataset against its index and, optionally, against its source.

Stops at the first problem and names the file (and sample) so the user knows what to
restore or reconvert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from packer import formats
from packer.encode import digest_of, read_input
from packer.errors import PackError
from packer.index import REJECTS_NAME, Index, SampleTable, open_dataset
from packer.scan import scan
from packer.verify_hash import sha256_file


@dataclass
class Report:
    """The outcome of `verify`: ok, or the first problem found."""

    folder: str
    ok: bool = True
    problem: str | None = None
    num_samples: int = 0
    num_shards: int = 0
    checked: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> Report:
        self.ok = False
        self.problem = problem
        return self


def verify(folder: str | Path, source: str | Path | None = None) -> Report:
    """Re-read every shard and sample; compare with the source when given."""
    folder = Path(folder)
    report = Report(str(folder))
    try:
        index, table = open_dataset(folder)
        report.num_samples, report.num_shards = index.num_samples, len(index.shards)
        _check_shards(folder, index)
        report.checked.append("shard sizes and sha256")
        _check_samples(folder, index, table)
        report.checked.append("sample digests and labels")
        if source is not None:
            _check_source(folder, index, table, Path(source))
            report.checked.append("source images present with their labels")
    except PackError as exc:
        return report.fail(str(exc))
    return report


def _check_shards(folder: Path, index: Index) -> None:
    for shard in index.shards:
        path = folder / shard.name
        if not path.is_file():
            raise PackError(f"{path}: shard is missing; restore it or reconvert")
        size = path.stat().st_size
        if size != shard.num_bytes:
            raise PackError(f"{path}: {size} bytes, index says {shard.num_bytes}; "
                            "the shard is truncated or replaced, restore it or reconvert")
        if sha256_file(path) != shard.sha256:
            raise PackError(f"{path}: sha256 differs from the index; the shard is damaged or "
                            "swapped, restore it or reconvert")


def _check_samples(folder: Path, index: Index, table: SampleTable) -> None:
    module = formats.load(index.format)
    reader = module.open_reader(folder, index, table)
    try:
        for _ in reader.read_range(0, index.num_samples):
            pass
        stored = module.read_labels(folder, index)
    finally:
        reader.close()
    labels = np.asarray(table.labels)
    if len(stored) != len(labels) or not np.array_equal(stored, labels):
        bad = _first_difference(stored, labels)
        raise PackError(f"{folder}: stored label of sample {bad} ({table.key(bad)!r}) differs "
                        "from the index; reconvert")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(index.class_names)):
        raise PackError(f"{folder}: a label is outside the {len(index.class_names)} classes")


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(diff[0]) if len(diff) else n - 1 if n else 0


def _check_source(folder: Path, index: Index, table: SampleTable, src: Path) -> None:
    source = scan(src)
    rejected = _rejected_paths(folder)
    positions = {table.key(i): i for i in range(len(table))}
    passthrough = index.encode.get("mode") == "passthrough"
    for item in source.items:
        if item.path in rejected:
            continue
        i = positions.get(item.key)
        if i is None:
            raise PackError(f"{item.path}: in the source but not in {folder} (key "
                            f"{item.key!r}); reconvert")
        if int(table.labels[i]) != item.label:
            raise PackError(f"{item.path}: label {item.label} in the source, "
                            f"{int(table.labels[i])} in {folder}; reconvert")
        if passthrough and digest_of(read_input(item.path)) != table.digest(i):
            raise PackError(f"{item.path}: bytes differ from sample {i} in {folder}; the "
                            "source changed or the dataset is damaged")
    extra = len(table) - (len(source.items) - len(rejected & {i.path for i in source.items}))
    if extra > 0:
        raise PackError(f"{folder}: {extra} samples are not in the source {src}")


def _rejected_paths(folder: Path) -> set[str]:
    path = folder / REJECTS_NAME
    if not path.exists():
        return set()
    lines = path.read_text(encoding="utf-8").splitlines()
    return {str(json.loads(line)["path"]) for line in lines if line.strip()}
