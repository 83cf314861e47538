"""`append(src, dst)`: grow a complete packed dataset with the new inputs of a source.

    plan     which inputs are new (by key), which DST holds already (checked), the
             labels of new classes (after DST's)
    stage    encode the new inputs into DST/.pack-append/ with DST's own options
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
from packer.conversion.append.plan import AppendPlan, Existing, plan_append
from packer.conversion.append.stage import stage, stage_dir
from packer.conversion.destination import refuse_inside_source, write_errors
from packer.conversion.writing import OnError, rejected
from packer.core.index import Index, read_index
from packer.errors import AppendInterrupted as AppendInterrupted  # defined with every error class

__all__ = ["AppendInterrupted", "AppendResult", "append"]


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the grown dataset's index and what it added."""

    index: Index
    num_new: int
    new_classes: tuple[str, ...] = ()
    first_new_label: int = 0
    num_new_rejects: int = 0

    @property
    def summary(self) -> str:
        """One line for the CLI: the new samples, then the new classes with their labels."""
        line = f"{self.num_new} new samples ({self.index.num_samples} in all)"
        if self.new_classes:
            labels = ", ".join(str(self.first_new_label + n) for n in range(len(self.new_classes)))
            line += f"; new classes: {', '.join(self.new_classes)} (labels {labels})"
        return line


def append(src: str | Path, dst: str | Path, encode: Mapping[str, Any] | None = None, *,
           workers: int | None = None, on_error: OnError = "skip", resume: bool = False,
           existing: Existing = "size",
           progress: Callable[[int], None] | None = None,
           on_total: Callable[[int], None] | None = None) -> AppendResult:
    """Add the inputs of `src` that the dataset `dst` does not hold yet (by key).

    `encode`: EncodeOptions fields (size, quality, ...) the caller expects; each must be
    DST's own, which new samples are stored with. `existing`: how an input whose key
    DST holds is compared with the stored file, when DST stores original files: "size"
    (one stat an input) or "digest" (each file read and hashed). `progress` gets counts
    of inputs done, `on_total` the number of new inputs.
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
        plan = plan_append(Path(src), folder, dict(encode or {}), existing)
        return _run(plan, workers, on_error, resume, progress, on_total)


def _run(plan: AppendPlan, workers: int | None, on_error: OnError, resume: bool,
         progress: Callable[[int], None] | None,
         on_total: Callable[[int], None] | None) -> AppendResult:
    first = commit.new_rejects(plan, None)
    if on_error == "fail" and first:
        raise rejected(first[0])
    if on_total is not None:
        on_total(len(plan.items))
    if not plan.items and not first:  # nothing new: DST stays as it is, byte for byte
        shutil.rmtree(stage_dir(plan.folder), ignore_errors=True)
        return AppendResult(plan.index, 0)
    from packer.conversion.append.merge import merge  # h5py and lmdb: loaded when an append merges

    staged = stage(plan, workers, on_error, resume, progress)
    merged = merge(plan, staged, stage_dir(plan.folder))
    commit.prepare(plan, staged, merged)
    record = commit.committing(plan.folder)
    assert record is not None  # prepare() just wrote it
    commit.apply(plan.folder, record)
    return _result(plan.folder, record, len(commit.new_rejects(plan, staged)))


def _result(folder: Path, record: dict[str, Any], rejects: int) -> AppendResult:
    return AppendResult(read_index(folder), int(record["num_new"]),
                        tuple(record["new_classes"]), int(record["first_new_label"]), rejects)

