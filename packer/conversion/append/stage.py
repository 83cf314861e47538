"""Step one of an append: encode the new inputs into `DST/.pack-append/`, DST untouched.

The staging folder is a small conversion of its own, through the same writer loop and
journal as `pack convert`: wds keeps every finished shard and npy every part for
`--resume`; lmdb and hdf5 redo the staging, which holds only the new inputs. wds shards
are named as DST's next shards from the start, so the commit moves them in unchanged.
New samples carry DST's fields, written by DST's writer as a conversion writes them.
The replacements of `--replace` are a second staging, a spool in `replace/`. When a
staging is complete, its `staged.json` says so.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packer import formats
from packer.conversion.append.plan import AppendPlan
from packer.conversion.append.spool import REPLACE_DIR, SpoolWriter
from packer.conversion.job import aborted_on_failure, closed_after, encoded, source_open
from packer.conversion.journal import Journal, Progress
from packer.conversion.writing import OnBadInput, WriterLoop
from packer.core.index import (
    SampleTable,
    ShardInfo,
    load_table,
    save_table,
    shard_from_json,
    shard_json,
)
from packer.core.layout import APPEND_DIR
from packer.core.record import Reject
from packer.formats._wds import WdsWriter
from packer.formats._wds_names import name_of
from packer.formats.base import Writer, WriterPlan
from packer.imaging.resize import load_torch
from packer.storage.files import fsync_dir, sha256_file, write_atomic

STAGED = "staged.json"
PREFIX = "staged."
READY = "ready"  # the grown dataset's files, before the commit (built by `merge`)


@dataclass(frozen=True)
class Staged:
    """The new samples, encoded and durable in the staging folder."""

    table: SampleTable  # their rows, locations as in the staged files
    shards: tuple[ShardInfo, ...]  # wds: the new shards; else the staged file
    rejects: list[Reject]
    image_types: tuple[str, ...]  # wds: member extensions of the new images
    exts: tuple[str, ...] = ()  # the spool of replacements: each sample's extension


class AppendWdsWriter(WdsWriter):
    """A wds writer whose numbering goes on after DST's shards; the wids index of the
    whole dataset is written when the grown dataset's files are built (`merge`), not here."""

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        self.end_part()
        return tuple(self.shards)


def stage_dir(folder: Path) -> Path:
    return folder / APPEND_DIR


def stage(plan: AppendPlan, workers: int | None, on_error: OnBadInput, resume: bool,
          progress: Callable[[int], None] | None, *, spool: bool = False) -> Staged:
    """Encode `plan.items` into the staging folder, or with `spool` `plan.replacing` into
    the spool of replacements (`SpoolWriter`); resumed when `resume` and the interrupted
    staging is of this same append. Returns what it holds."""
    where = stage_dir(plan.folder) / REPLACE_DIR if spool else stage_dir(plan.folder)
    items = plan.replacing if spool else plan.items
    old = plan.index.shards if plan.index.format == "wds" and not spool else ()
    if resume and (staged := read_staged(where, plan.fingerprint)) is not None:
        if progress is not None:
            progress(len(items))
        return staged
    if plan.options.pixels:
        load_torch()  # npy resizes with torch: import it up front, as convert does
    journal = Journal(where)
    done = _resume_point(journal, plan, resume, old)
    writer = _open_spool(plan, where) if spool else _open_writer(plan, where, done, old)
    module = formats.load(plan.index.format)
    job = WriterLoop(writer, journal, done, on_error, progress,
                     group=plan.shards.max_samples if module.GROUPS_INPUTS and not spool
                     else None, path_of=lambda position: items[position].path,
                     drop_duplicates=plan.drop_duplicates and not spool)
    if job.kept is not None:  # --drop-duplicates: DST's samples are kept first
        job.kept = {**_digests(plan), **job.kept}
    if progress is not None:
        progress(done.src_stop)
    with aborted_on_failure(writer):
        with source_open(plan.source), closed_after(encoded(items[done.src_stop :],
                                                            plan.options, workers)) as records:
            job.consume(records)
        table = job.build_table()
        shards = writer.finish(table)
    types = tuple(sorted(getattr(writer, "image_types", ())))
    staged = Staged(table, tuple(shards[len(old) :]), job.rejects(), types,
                    tuple(getattr(writer, "exts", ())))
    _write_staged(where, plan.fingerprint, staged)
    journal.remove()
    return staged


def _digests(plan: AppendPlan) -> dict[bytes, str]:
    """{digest: key} of DST's samples, the first key of each digest."""
    kept: dict[bytes, str] = {}
    for i in range(len(plan.table)):
        kept.setdefault(plan.table.digest(i), plan.table.key(i))
    return kept


def _open_spool(plan: AppendPlan, where: Path) -> Writer:
    height, width = plan.options.size or (0, 0)
    return SpoolWriter(where, plan.index.fields, plan.index.format,
                       height * width * 3 if plan.options.pixels else None)


def _open_writer(plan: AppendPlan, where: Path, done: Progress,
                 old: tuple[ShardInfo, ...]) -> Writer:
    size = plan.options.size if plan.options.pixels else None
    kept = done.shards or old
    writer_plan = WriterPlan(where, len(plan.items), size, plan.shards, done.num_samples,
                             kept, name_of(plan.folder), plan.index.fields)
    if plan.index.format == "wds":
        return AppendWdsWriter(writer_plan)
    return formats.load(plan.index.format).open_writer(writer_plan)


def _resume_point(journal: Journal, plan: AppendPlan, resume: bool,
                  old: tuple[ShardInfo, ...]) -> Progress:
    """Start afresh, or keep the parts an interrupted staging of this append made durable
    (its wds shards in the staging folder, DST's own shards as they are)."""
    where = journal.state.parent
    if not resume or journal.fingerprint() != plan.fingerprint:
        shutil.rmtree(where, ignore_errors=True)
        journal.start(plan.fingerprint)
        return Progress(shards=old)
    parts = journal.read_parts()
    names = {shard.name for shard in old}
    keep = next((number for number, part in enumerate(parts) if not all(
        str(s["name"]) in names or _intact(where, s) for s in part["shards"])), len(parts))
    journal.truncate(keep)
    done = journal.load(parts[:keep])
    if not keep:
        done.shards = old
    return done


def _intact(where: Path, shard: dict[str, object]) -> bool:
    path = where / str(shard["name"])
    return path.is_file() and sha256_file(path) == shard["sha256"]


def _write_staged(where: Path, fingerprint: str, staged: Staged) -> None:
    save_table(where, staged.table, prefix=PREFIX, with_records=True)
    text = json.dumps({"fingerprint": fingerprint,
                       "shards": [shard_json(shard) for shard in staged.shards],
                       "rejects": [dataclasses.asdict(r) for r in staged.rejects],
                       "image_types": list(staged.image_types), "exts": list(staged.exts)})
    write_atomic(where / STAGED, text.encode("utf-8"))
    fsync_dir(where)


def read_staged(where: Path, fingerprint: str) -> Staged | None:
    """The complete staging of this append, or None (none, another append's, damaged)."""
    try:
        data = json.loads((where / STAGED).read_text(encoding="utf-8"))
        if data["fingerprint"] != fingerprint:
            return None
        return Staged(load_table(where, prefix=PREFIX, mmap=False),
                      tuple(shard_from_json(shard) for shard in data["shards"]),
                      [Reject(**r) for r in data["rejects"]],
                      tuple(data["image_types"]), tuple(data.get("exts", ())))
    except (OSError, ValueError, KeyError, TypeError):
        return None
