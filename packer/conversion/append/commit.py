"""Step three of an append: the table, rejects and index.json, then one commit.

Everything the grown dataset needs is first written, fsynced, into the staging folder;
then `commit.json` lists the renames that put it in DST, index.json last (and, for
npy, how images.npy grows in place: the staged rows after DST's, then the header),
and is written atomically: from that moment the append is decided, and `--resume`
after an interruption only finishes the commit (each rename is done once: a file
already moved has left the staging folder; the growth is redone whole). Until
index.json lands a reader sees DST's old index; in the short window of the commit, one
that opens the dataset finds a table (or an npy header) newer than its index and is
refused, never served a mix.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packer.conversion.append.plan import AppendPlan
from packer.conversion.append.stage import READY, Staged, stage_dir
from packer.core.index import (
    INDEX_NAME,
    REJECTS_NAME,
    SampleTable,
    ShardInfo,
    save_table,
    table_files,
    write_index,
)
from packer.core.layout import APPEND_DIR
from packer.core.record import Reject
from packer.storage.files import fsync_dir, write_atomic

COMMIT = "commit.json"
APPENDED = "appended"  # index.json's extra: one entry per append, oldest first


@dataclass
class Merged:
    """The grown dataset's data files, ready to be moved into DST."""

    shards: tuple[ShardInfo, ...]  # every shard, DST's first
    table: SampleTable  # every sample, DST's first
    moves: list[tuple[str, str]]  # (path in the staging folder, path in DST)
    extra: dict[str, Any] = field(default_factory=dict)  # for index.json's extra
    extend: dict[str, Any] | None = None  # a file that grows in place at the commit (npy)
    field_counts: tuple[int, ...] = ()  # per field, the samples with a value
    remove: list[str] = field(default_factory=list)  # DST files the grown dataset drops


def new_rejects(plan: AppendPlan, *stagings: Staged | None) -> list[Reject]:
    """This append's rejects that DST's rejects.jsonl does not list yet."""
    listed = {reject.path for reject in plan.old_rejects}
    return [r for r in _found(plan, stagings) if r.path not in listed]


def _found(plan: AppendPlan, stagings: tuple[Staged | None, ...]) -> list[Reject]:
    """The rejects of the scan, the conflicts and the stagings."""
    return plan.source.rejects + plan.conflicts + \
        [r for staged in stagings if staged is not None for r in staged.rejects]


def prepare(plan: AppendPlan, staged: Staged, spooled: Staged | None, merged: Merged
            ) -> dict[str, Any]:
    """Write the table, rejects and index of the grown dataset, then commit.json (the
    record it returns)."""
    where = stage_dir(plan.folder)
    ready = where / READY
    save_table(ready, merged.table)
    num_rejected = _write_rejects(plan, staged, spooled, ready)
    replaced = [] if spooled is None else spooled.table.keys()
    entry: dict[str, Any] = {"num_samples": len(staged.table),
                             "new_classes": list(plan.new_classes)}
    if replaced:
        entry["replaced"] = replaced
    history = [*plan.index.extra.get(APPENDED, ()), entry]
    index = write_index(ready, replace(
        plan.index, num_samples=len(merged.table), class_names=plan.class_names,
        shards=merged.shards, num_rejected=num_rejected, field_counts=merged.field_counts,
        extra={**plan.index.extra, **merged.extra, APPENDED: history}))
    names = (*(path.name for path in table_files(ready, index)), REJECTS_NAME, INDEX_NAME)
    moves = [*merged.moves, *((f"{READY}/{name}", name) for name in names)]
    record = {"moves": moves, "extend": merged.extend, "remove": merged.remove,
              "num_new": len(staged.table), "new_classes": list(plan.new_classes),
              "replaced": replaced, "first_new_label": len(plan.index.class_names)}
    write_atomic(where / COMMIT, json.dumps(record).encode("utf-8"))
    fsync_dir(where)
    return record


def _write_rejects(plan: AppendPlan, staged: Staged, spooled: Staged | None, ready: Path
                   ) -> int:
    """The grown dataset's rejects.jsonl: DST's (less the inputs tried again: packed now,
    or rejects again), then this append's; returns their count."""
    tried = {item.path for item in [*plan.items, *plan.replacing]}
    kept = [r for r in plan.old_rejects if r.path not in tried]
    listed = {r.path for r in kept}
    rejects = kept + [r for r in _found(plan, (staged, spooled)) if r.path not in listed]
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects)
    write_atomic(ready / REJECTS_NAME, lines.encode("utf-8"))
    return len(rejects)


def committing(folder: Path) -> dict[str, Any] | None:
    """The commit record of an append that was decided, or None."""
    try:
        data: dict[str, Any] = json.loads((stage_dir(folder) / COMMIT).read_text("utf-8"))
        return data
    except (OSError, ValueError):
        return None


def apply(folder: Path, record: dict[str, Any]) -> None:
    """Do the renames commit.json lists that are not done yet (index.json last), delete
    the files of DST that the grown dataset does not list, then drop the staging."""
    where = stage_dir(folder)
    if record.get("extend"):
        extend(folder, where, record["extend"])
    for src, dst in record["moves"]:
        source = where / src
        if source.exists():
            target = folder / dst
            target.parent.mkdir(exist_ok=True)  # hdf5's data.parts/ for its first part
            os.replace(source, target)
            fsync_dir(target.parent)
    fsync_dir(folder)
    for name in record.get("remove", ()):  # parts a rewrite into one file made stale
        (folder / name).unlink(missing_ok=True)
    done = finished_dir(folder)
    shutil.rmtree(done, ignore_errors=True)
    os.replace(where, done)  # one step: a staging folder left means an unfinished append
    fsync_dir(folder)
    shutil.rmtree(done, ignore_errors=True)


def extend(folder: Path, where: Path, grow: dict[str, Any]) -> None:
    """Grow a DST file in place: cut it back to its old size (a rerun after an
    interruption), append the staged bytes, fsync, then write its new header.

    Done again from the start by a rerun: the staged file stays until the end."""
    with open(folder / grow["file"], "r+b") as out:
        out.truncate(grow["keep"])
        copy_range(where / grow["source"], int(grow["start"]), out.fileno(), int(grow["keep"]),
                   int(grow["size"]), "delete the .pack-append folder and append again")
        os.fsync(out.fileno())
        os.pwrite(out.fileno(), bytes.fromhex(grow["header"]), 0)
        os.fsync(out.fileno())


def copy_range(src: Path, start: int, out: int, at: int, size: int,
               fix: str = "restore it or reconvert") -> int:
    """Copy `size` bytes of `src` from `start` into the open file `out` at `at` (the
    kernel copies); returns where the copy ends in `out`."""
    with open(src, "rb") as handle:
        while size > 0:
            done = os.copy_file_range(handle.fileno(), out, size, start, at)
            if done <= 0:
                raise OSError(f"{src}: ended {size} bytes early; {fix}")
            start, at, size = start + done, at + done, size - done
    return at


def finished_dir(folder: Path) -> Path:
    """Where a finished append's staging folder goes to be deleted."""
    return folder / (APPEND_DIR + ".done")

