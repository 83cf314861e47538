"""Compare a packed dataset with the source it was made from (`pack verify --source`).

Every source item not rejected must be a sample with its key, label and fields, and
its bytes too when the dataset must hold the same bytes as the source (see `_source_digest`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from packer.core.checks import digest_of
from packer.core.index import REJECTS_NAME, Index, SampleTable
from packer.core.record import SourceItem
from packer.errors import PackError, RejectReason
from packer.source.fields import FieldChoice
from packer.source.kinds import Source
from packer.source.members import ArchiveSource
from packer.source.packed import stores_original
from packer.source.parquet_read import ParquetSource
from packer.source.scan import scan
from packer.source.shardset import ShardSet
from packer.storage.files import read_input

__all__ = ["check_against_source"]


def check_against_source(folder: Path, index: Index, table: SampleTable, src: Path,
                         annotations: Path | None = None) -> None:
    """Every source item not rejected is a sample with its key, label (and bytes, when
    the dataset must hold the same bytes as the source: see `_source_digest`).

    `annotations`: the COCO file SRC was converted with; its fields are compared too."""
    names = tuple(spec.name for spec in index.fields)  # the source's fields, as packed
    source = scan(src, FieldChoice(keep=names, enabled=bool(names), types=index.fields,
                                   annotations=None if annotations is None
                                   else str(annotations), label=_label_option(index)))
    if source.class_names != index.class_names and not _appended_order(index, source):
        raise PackError(f"{folder}: class names differ from the source {src} "
                        f"({len(index.class_names)} vs {len(source.class_names)} classes); "
                        "reconvert")
    label_of = [index.class_names.index(name) for name in source.class_names]
    rejected = _rejected_paths(folder)
    positions = {table.key(i): i for i in range(len(table))}
    expected = _source_digest(index, source)
    for item in source.items:
        i = positions.pop(item.key, None)
        if i is None:
            root = source.root if source.archive is None else source.root.parent
            if _was_rejected(item.path, root, rejected):
                continue
            raise PackError(f"{item.path}: in the source but not in {folder} (key "
                            f"{item.key!r}); reconvert")
        if int(table.labels[i]) != label_of[item.label]:
            raise PackError(f"{item.path}: label {label_of[item.label]} in the source, "
                            f"{int(table.labels[i])} in {folder}; reconvert")
        if expected is not None and expected(item) != table.digest(i):
            raise PackError(f"{item.path}: bytes differ from sample {i} in {folder}; the "
                            "source changed or the dataset is damaged")
        if table.fields is not None and _fields_digest(source, item) != table.fields.digest(i):
            raise PackError(f"{item.path}: fields ({', '.join(names)}) differ from sample {i} "
                            f"in {folder}; the source changed or the dataset is damaged")
    if positions:
        raise PackError(f"{folder}: {len(positions)} samples are not in the source {src} "
                        f"(first: {min(positions, key=positions.__getitem__)!r})")


def _label_option(index: Index) -> str | None:
    """The --label a webdataset source was converted with (the job's settings keep it)."""
    job = index.extra.get("job")
    settings = job.get("settings") if isinstance(job, dict) else None
    label = settings.get("label") if isinstance(settings, dict) else None
    return label if isinstance(label, str) else None


def _appended_order(index: Index, source: Source) -> bool:
    """Whether the dataset holds the source's classes in the order appends gave them
    (an append puts new classes after the old ones), so labels compare by name."""
    return bool(index.extra.get("appended")) and \
        sorted(index.class_names) == sorted(source.class_names)


def _fields_digest(source: Source, item: SourceItem) -> bytes:
    """The digest of an item's fields record, read from a packed source when it is one."""
    if source.origin is not None:
        try:
            return digest_of(source.origin.read_fields(item))
        except RejectReason as exc:
            raise PackError(f"{item.path}: {exc}") from exc
    return digest_of(item.fields)


def _source_digest(index: Index, source: Source) -> Callable[[SourceItem], bytes] | None:
    """How to get the digest a sample must have, or None when its bytes may differ.

    Against image files or archive members: when the dataset stores the original files.
    Against a packed dataset: when the dataset is a byte copy of it, or both store the
    original files.
    """
    archive, origin = source.archive, source.origin
    if archive is not None:
        return (lambda item: digest_of(_read_member(archive, item))) \
            if stores_original(index) else None
    if origin is None:
        return (lambda item: digest_of(_read_source(item.path))) \
            if stores_original(index) else None
    made = index.extra.get("source")
    copy_of_it = isinstance(made, dict) and bool(made.get("copy")) \
        and made.get("index_sha256") == origin.fingerprint
    if copy_of_it or (stores_original(index) and stores_original(origin.index)):
        return lambda item: origin.digest(item.position)
    return None


def _read_member(archive: ArchiveSource | ShardSet | ParquetSource,
                 item: SourceItem) -> bytes:
    try:
        return archive.read(item)
    except RejectReason as exc:
        raise PackError(f"{item.path}: cannot read the source member ({exc})") from exc


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
