"""`append(src, dst)`: grow a complete packed dataset with the new inputs of a source.

    plan     which inputs are new (by key), which DST holds already (checked: bytes,
             class, field values), the labels of new classes (after DST's), SRC's
             fields matched to DST's
    stage    encode the new inputs into DST/.pack-append/ with DST's own options and
             fields; with --replace, the replacements into its replace/ spool
    merge    build the grown data files there, old bytes copied, never re-encoded
    commit   table, rejects, index.json and commit.json, then renames, index.json last

DST is the old complete dataset until the commit. An interrupted append leaves the
staging folder: a plain append then refuses ("rerun with --resume"), `--resume`
continues it (kept wds shards and npy parts are not encoded again) or finishes the
renames of a decided commit. Appending what DST holds already is a no-op.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packer.conversion.append import commit
from packer.conversion.append.held import Existing
from packer.conversion.append.plan import AppendPlan, plan_append
from packer.conversion.append.stage import stage, stage_dir
from packer.conversion.destination import refuse_inside_source, write_errors
from packer.conversion.writing import OnBadInput, rejected
from packer.core.index import Index, read_index
from packer.core.layout import SPLITS_DIR
from packer.errors import AppendInterrupted as AppendInterrupted  # defined with every error class
from packer.source.fields import FieldChoice

__all__ = ["AppendInterrupted", "AppendResult", "append"]

SHOWN = 5  # replaced keys the summary names


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the grown dataset's index and what it added."""

    index: Index
    num_new: int
    new_classes: tuple[str, ...] = ()
    first_new_label: int = 0
    num_new_rejects: int = 0
    replaced: tuple[str, ...] = ()  # the keys of the samples --replace gave new bytes
    splits_stale: bool = False  # DST has splits (pack split), made for the dataset before

    @property
    def summary(self) -> str:
        """One line for the CLI: the new samples, the new classes with their labels, and
        the samples replaced (whose index now holds other bytes)."""
        line = f"{self.num_new} new samples ({self.index.num_samples} in all)"
        if self.new_classes:
            labels = ", ".join(str(self.first_new_label + n) for n in range(len(self.new_classes)))
            line += f"; new classes: {', '.join(self.new_classes)} (labels {labels})"
        if self.replaced:
            shown = ", ".join(self.replaced[:SHOWN])
            more = f" and {len(self.replaced) - SHOWN} more" if len(self.replaced) > SHOWN else ""
            line += f"; replaced {len(self.replaced)} samples in place: {shown}{more}"
        return line


def append(src: str | Path, dst: str | Path, encode: Mapping[str, Any] | None = None, *,
           workers: int | None = None, on_error: OnBadInput = "skip", resume: bool = False,
           existing: Existing = "size", fields: FieldChoice | None = None,
           replace: bool = False, drop_duplicates: bool = False,
           progress: Callable[[int], None] | None = None,
           on_total: Callable[[int], None] | None = None) -> AppendResult:
    """Add the inputs of `src` that the dataset `dst` does not hold yet (by key).

    `encode`: EncodeOptions fields (size, quality, ...) the caller expects; each must be
    DST's own, which new samples are stored with. `existing`: how an input whose key
    DST holds is compared with the stored file, when DST stores original files: "size"
    (one stat an input) or "digest" (each file read and hashed). `fields`: which of
    SRC's per-sample fields to take (default all; each must be one of DST's, of the
    same type). `replace`: an input whose key DST holds with other bytes, class or
    field values replaces that sample at its index (a reject otherwise); a reader's
    state saved before stays valid, but those indices now hold the new samples.
    `drop_duplicates`: a new input whose stored bytes a sample has already is listed
    in rejects.jsonl, not packed. `progress` gets counts of inputs done, `on_total`
    the number of inputs to encode.
    """
    folder = Path(dst)
    refuse_inside_source(Path(src), folder)
    with write_errors(folder):
        shutil.rmtree(commit.finished_dir(folder), ignore_errors=True)
        record = commit.committing(folder)
        if not resume and (record is not None or stage_dir(folder).exists()):
            raise AppendInterrupted(f"{folder}: an append was interrupted: rerun with "
                                    "--resume (or delete its .pack-append folder to forget "
                                    "it, if the dataset still verifies as it was)")
        if record is not None:  # decided: finish the renames
            commit.apply(folder, record)
            return _result(folder, record, 0)
        plan = plan_append(Path(src), folder, dict(encode or {}), existing, fields, replace,
                           drop_duplicates)
        return _run(plan, workers, on_error, resume, progress, on_total)


def _run(plan: AppendPlan, workers: int | None, on_error: OnBadInput, resume: bool,
         progress: Callable[[int], None] | None,
         on_total: Callable[[int], None] | None) -> AppendResult:
    first = commit.new_rejects(plan)
    if on_error == "fail" and first:
        raise rejected(first[0])
    if on_total is not None:
        on_total(len(plan.items) + len(plan.replacing))
    if not plan.items and not plan.replacing and not first:  # nothing new: DST stays as it
        shutil.rmtree(stage_dir(plan.folder), ignore_errors=True)  # is, byte for byte
        return AppendResult(plan.index, 0)
    from packer.conversion.append.merge import merge  # h5py and lmdb: loaded when an append merges

    staged = stage(plan, workers, on_error, resume, progress)
    spooled = stage(plan, workers, on_error, resume, progress, spool=True) \
        if plan.replacing else None
    merged = merge(plan, staged, spooled)
    record = commit.prepare(plan, staged, spooled, merged)
    commit.apply(plan.folder, record)
    return _result(plan.folder, record, len(commit.new_rejects(plan, staged, spooled)))


def _result(folder: Path, record: dict[str, Any], rejects: int) -> AppendResult:
    return AppendResult(read_index(folder), int(record["num_new"]),
                        tuple(record["new_classes"]), int(record["first_new_label"]), rejects,
                        tuple(record.get("replaced", ())), (folder / SPLITS_DIR).is_dir())

