"""Check a packed dataset against its index and, optionally, against its source.

Stops at the first problem and names the file (and sample) so the user knows what to
restore or reconvert.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packer import formats
from packer.encode import digest_of, read_input
from packer.errors import PackError
from packer.formats._wids import check_index as check_wids_index
from packer.index import REJECTS_NAME, Index, SampleTable, open_dataset
from packer.packed import stores_original
from packer.record import SourceItem
from packer.scan import Source, scan
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


def verify_remote(url: str, storage_options: Mapping[str, Any] | None,
                  source: str | Path | None = None, work: str | Path | None = None) -> Report:
    """`verify` for a dataset behind a URL: downloaded whole into a temporary folder
    (under `work`, default the system's), checked, deleted. Problems name the URL."""
    from packer.remote import download_dataset  # fsspec is an optional extra

    with tempfile.TemporaryDirectory(prefix="pack-verify-", dir=work) as tmp:
        try:
            download_dataset(url, storage_options, Path(tmp))
            report = verify(tmp, source)
        except PackError as exc:
            report = Report(tmp).fail(str(exc))
    report.folder = url
    if report.problem is not None:
        report.problem = report.problem.replace(tmp, url.rstrip("/"))
    return report


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
        if index.format == "wds" and check_wids_index(folder, index):  # after the data:
            report.checked.append("wids index")  # a damaged index.json is reported as such
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
    finally:
        reader.close()  # first: py-lmdb refuses a second open of one environment
    stored = module.read_labels(folder, index)
    labels = np.asarray(table.labels)
    if len(stored) != len(labels) or not np.array_equal(stored, labels):
        bad = _first_difference(stored, labels)
        labels_file = getattr(module, "LABELS", None)  # npy keeps labels beside the shards
        where = folder / (labels_file or index.shards[index.shard_of(bad)].name)
        raise PackError(f"{where}: stored label of sample {bad} ({table.key(bad)!r}) differs "
                        "from the index; restore the file or reconvert")
    if len(labels) and (labels.min() < 0 or labels.max() >= len(index.class_names)):
        raise PackError(f"{folder}: a label is outside the {len(index.class_names)} classes")


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(diff[0]) if len(diff) else n - 1 if n else 0


def _check_source(folder: Path, index: Index, table: SampleTable, src: Path) -> None:
    """Every source item not rejected is a sample with its key, label (and bytes, when
    the dataset must hold the same bytes as the source: see `_source_digest`)."""
    source = scan(src)
    if source.class_names != index.class_names:
        raise PackError(f"{folder}: class names differ from the source {src} "
                        f"({len(index.class_names)} vs {len(source.class_names)} classes); "
                        "reconvert")
    rejected = _rejected_paths(folder)
    positions = {table.key(i): i for i in range(len(table))}
    expected = _source_digest(index, source)
    for item in source.items:
        i = positions.pop(item.key, None)
        if i is None:
            if _was_rejected(item.path, source.root, rejected):
                continue
            raise PackError(f"{item.path}: in the source but not in {folder} (key "
                            f"{item.key!r}); reconvert")
        if int(table.labels[i]) != item.label:
            raise PackError(f"{item.path}: label {item.label} in the source, "
                            f"{int(table.labels[i])} in {folder}; reconvert")
        if expected is not None and expected(item) != table.digest(i):
            raise PackError(f"{item.path}: bytes differ from sample {i} in {folder}; the "
                            "source changed or the dataset is damaged")
    if positions:
        raise PackError(f"{folder}: {len(positions)} samples are not in the source {src} "
                        f"(first: {min(positions, key=positions.__getitem__)!r})")


def _source_digest(index: Index, source: Source) -> Callable[[SourceItem], bytes] | None:
    """How to get the digest a sample must have, or None when its bytes may differ.

    Against image files: when the dataset stores the original files. Against a packed
    dataset: when the dataset is a byte copy of it, or both store the original files.
    """
    origin = source.origin
    if origin is None:
        return (lambda item: digest_of(_read_source(item.path))) \
            if stores_original(index) else None
    made = index.extra.get("source")
    copy_of_it = isinstance(made, dict) and bool(made.get("copy")) \
        and made.get("index_sha256") == origin.identity
    if copy_of_it or (stores_original(index) and stores_original(origin.index)):
        return lambda item: origin.digest(item.position)
    return None


def _read_source(path: str) -> bytes:
    try:
        return read_input(path)
    except Exception as exc:  # read_input words its reasons for rejects.jsonl
        raise PackError(f"{path}: cannot read the source image ({exc})") from exc


def _was_rejected(path: str, root: Path, rejected: set[str]) -> bool:
    """Whether rejects.jsonl lists `path`, however the source was spelled at convert time.

    Reject paths are written as the scan saw them (relative or absolute, from the working
    folder of that run), so compare absolute paths, then paths relative to the root.
    `rejected` holds each listed path as written and made absolute.
    """
    if path in rejected or os.path.abspath(path) in rejected:
        return True
    tail = os.sep + os.path.relpath(path, root)
    return any(r.endswith(tail) for r in rejected)


def _rejected_paths(folder: Path) -> set[str]:
    path = folder / REJECTS_NAME
    if not path.exists():
        return set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        paths = {str(json.loads(line)["path"]) for line in lines if line.strip()}
    except (ValueError, KeyError, TypeError) as exc:
        raise PackError(f"{path}: unreadable rejects list ({exc}); reconvert") from exc
    return paths | {os.path.abspath(p) for p in paths}
