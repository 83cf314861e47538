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
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packer.conversion.append.plan import AppendPlan
from packer.conversion.append.stage import READY, STAGE_DIR, Staged, stage_dir
from packer.core import checks
from packer.core.index import (
    FIELDS_NAME,
    INDEX_NAME,
    KEYS_NAME,
    REJECTS_NAME,
    SAMPLES_NAME,
    TABLE_DIGEST,
    save_table,
    table_files,
)
from packer.core.record import Reject
from packer.storage.atomic import fsync_dir, write_atomic

if TYPE_CHECKING:
    from packer.conversion.append.merge import Merged

COMMIT = "commit.json"
APPENDED = "appended"  # index.json's extra: one entry per append, oldest first


def new_rejects(plan: AppendPlan, staged: Staged | None, spooled: Staged | None = None
                ) -> list[Reject]:
    """This append's rejects that DST's rejects.jsonl does not list yet."""
    listed = {reject.path for reject in plan.old_rejects}
    found = plan.scan_rejects() + plan.conflicts + (staged.rejects if staged else []) + \
        (spooled.rejects if spooled else [])
    return [r for r in found if r.path not in listed]


def replaced_keys(spooled: Staged | None) -> list[str]:
    """The keys of the samples a --replace replaced (those of its inputs not rejected)."""
    return [] if spooled is None else spooled.table.keys()


def prepare(plan: AppendPlan, staged: Staged, spooled: Staged | None, merged: Merged) -> None:
    """Write the table, rejects and index of the grown dataset, then commit.json."""
    where = stage_dir(plan.folder)
    ready = where / READY
    save_table(ready, merged.table)
    tried = {item.path for item in [*plan.items, *plan.replacing]}  # packed, or a reject now
    kept = [r for r in plan.old_rejects if r.path not in tried]
    listed = {r.path for r in kept}
    found = plan.source.rejects + plan.conflicts + staged.rejects + \
        (spooled.rejects if spooled else [])
    rejects = kept + [r for r in found if r.path not in listed]
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects)
    write_atomic(ready / REJECTS_NAME, lines.encode("utf-8"))
    replaced = replaced_keys(spooled)
    entry: dict[str, Any] = {"num_samples": len(staged.table),
                             "new_classes": list(plan.new_classes)}
    if replaced:
        entry["replaced"] = replaced
    history = [*plan.index.extra.get(APPENDED, ()), entry]
    index = replace(plan.index, num_samples=len(merged.table), class_names=plan.class_names,
                    shards=merged.shards, num_rejected=len(rejects),
                    field_counts=merged.field_counts,
                    extra={**plan.index.extra, **merged.extra, APPENDED: history})
    digest = checks.files_digest(table_files(ready, index))
    index = replace(index, extra={**index.extra, TABLE_DIGEST: digest})
    text = json.dumps(index.to_json(), indent=1, sort_keys=True, ensure_ascii=False)
    write_atomic(ready / INDEX_NAME, (text + "\n").encode("utf-8"))
    tables = (SAMPLES_NAME, KEYS_NAME, *((FIELDS_NAME,) if index.fields else ()))
    moves = [*merged.moves, *((f"{READY}/{name}", name) for name in
                              (*tables, REJECTS_NAME, INDEX_NAME))]
    record = {"moves": moves, "extend": merged.extend, "remove": merged.remove,
              "num_new": len(staged.table),
              "new_classes": list(plan.new_classes), "replaced": replaced,
              "first_new_label": len(plan.index.class_names)}
    write_atomic(where / COMMIT, json.dumps(record).encode("utf-8"))
    fsync_dir(where)


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
    with open(folder / grow["file"], "r+b") as out, \
            open(where / grow["source"], "rb") as staged:
        out.truncate(grow["keep"])
        start, at, size = int(grow["start"]), int(grow["keep"]), int(grow["size"])
        while size > 0:
            done = os.copy_file_range(staged.fileno(), out.fileno(), size, start, at)
            if done <= 0:
                raise OSError(f"{where / grow['source']}: ended {size} bytes early; "
                              "delete the .pack-append folder and append again")
            start, at, size = start + done, at + done, size - done
        os.fsync(out.fileno())
        os.pwrite(out.fileno(), bytes.fromhex(grow["header"]), 0)
        os.fsync(out.fileno())


def finished_dir(folder: Path) -> Path:
    """Where a finished append's staging folder goes to be deleted."""
    return folder / (STAGE_DIR + ".done")

