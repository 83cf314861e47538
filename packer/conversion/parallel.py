"""Ray tasks that write wds shards in parallel; the driver commits them and the index.

    driver (pack convert)                         Ray cluster (any node)
      scan -> groups of --shard-samples inputs --> encode the group, write its shard(s)
                                                   to DST/.pack-state/groups/NNNNNNN/
      in group order: rename the shards to      <-- shard sizes, sha256, table rows,
      <name>-NNNNN.tar, journal the part            image types, rejects (metadata only)
      the wids index, index.json last

Why groups of inputs: which shard a sample lands in must not depend on who wrote it.
With `--shard-samples N`, shard boundaries fall every N *inputs* (a local run rolls the
same way), so a task knows its shards before any other task has run, and the result is
byte-identical to a local run: same bytes, same names, same index.
Within a group a shard still rolls at --shard-size.

DST must be a folder that every node mounts at the same path (like SRC); a URL DST is
written and uploaded by the driver. Resume works as for a local run: every committed
group is a journalled part; a group's unfinished folder is simply written again.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from packer.conversion.journal import STATE_DIR, Progress
from packer.conversion.writing import GroupResult, WriterLoop
from packer.core.index import SampleTable, ShardInfo
from packer.core.record import Record, Reject, SourceItem
from packer.encode import EncodeOptions
from packer.errors import DestinationError
from packer.formats._wds import WdsWriter
from packer.formats._wds_names import DEFAULT_STEM, remove_strays, shard_name, stem_of
from packer.formats._wids import index_extra, member_types
from packer.formats.base import Location, ShardOptions, WriterPlan
from packer.storage.files import fsync_dir

GROUPS_DIR = "groups"
TASK_BATCH = 32  # inputs encoded at a time inside a task


class CommittedShards:
    """The driver's Writer: shards arrive written; it names and lists them (see convert).

    What an interrupted run left beyond its journalled shards (a shard being written by
    a local writer, one committed but not journalled) goes first: the tasks write them
    again, and no stray file may outlive the run.
    """

    resumable = True

    def __init__(self, folder: Path, done: tuple[ShardInfo, ...], name: str | None) -> None:
        self.folder = folder
        self.stem = stem_of(folder, done, name)
        self.done = done
        self.shards = list(done)
        self.image_types: set[str] = set()
        self.index_extra: dict[str, Any] = {}
        remove_strays(folder, done)

    def commit(self, result: GroupResult) -> None:
        """Take a task's shards in: final names, numbered after those so far."""
        commit_group(self.folder, result, self.shards, self.stem)
        self.image_types.update(result.image_types)

    def part_full(self, next_size: int) -> bool:
        return False

    def add(self, record: Record) -> Location:
        raise TypeError("shards of a parallel run are written by the Ray tasks")

    def end_part(self) -> None:
        """The tasks ended their shards."""

    def finish(self, table: SampleTable) -> tuple[ShardInfo, ...]:
        shards = tuple(self.shards)
        types = self.image_types | member_types(self.folder, self.done)
        self.index_extra = index_extra(self.folder, self.stem, shards, table, types)
        return shards

    def abort(self) -> None:
        """Nothing open here; unfinished group folders stay in the resume state."""


def groups_folder(folder: Path) -> Path:
    return folder / STATE_DIR / GROUPS_DIR


def plan_groups(items: Sequence[SourceItem], start: int,
                size: int) -> Iterator[tuple[int, int, Sequence[SourceItem]]]:
    """(group number, first input, items) from input `start` on, aligned to `size`.

    A resumed run may start inside a group (the inputs before `start` were rejected):
    that group's task gets the rest of it, and writes the same shard a full task would.
    """
    position = start
    while position < len(items):
        group = position // size
        stop = min(len(items), (group + 1) * size)
        yield group, position, items[position:stop]
        position = stop


def write_group(task: tuple[int, int, Sequence[SourceItem]], folder: str,
                options: EncodeOptions, max_bytes: int, cwd: str,
                stop_at_reject: bool) -> GroupResult:
    """The Ray task: encode one group and write its shard(s) under the groups folder."""
    group, first, items = task
    target = groups_folder(Path(folder)) / f"{group:07d}"
    try:
        shutil.rmtree(target, ignore_errors=True)  # what a killed run left of this group
        target.mkdir(parents=True)
        return _write_group(target, group, first, items, options, max_bytes, cwd,
                            stop_at_reject)
    except OSError as exc:  # a node that cannot write DST: one line, not a remote traceback
        raise DestinationError(
            f"{target}: cannot write on node {socket.gethostname()} ({exc.strerror or exc}); "
            "DST must be writable at the same path on every node, then rerun with --resume"
        ) from None


def _write_group(target: Path, group: int, first: int, items: Sequence[SourceItem],
                 options: EncodeOptions, max_bytes: int, cwd: str,
                 stop_at_reject: bool) -> GroupResult:
    """Encode a batch at a time (memory stays one batch whatever the group size) and
    write each record as it comes through the writer loop, rolling at `max_bytes` as a
    local run does."""
    from packer.conversion.ray import encode_batch_at

    plan = WriterPlan(target, len(items), options.size, ShardOptions(max_bytes=max_bytes),
                      name=DEFAULT_STEM)  # renamed on commit (`commit_group`)
    writer = WdsWriter(plan)
    loop = WriterLoop(writer, None, Progress(), "skip",
                      path_of=lambda position: items[position - first].path)
    results = (result for start in range(0, len(items), TASK_BATCH)
               for result in encode_batch_at(list(items[start : start + TASK_BATCH]),
                                             options, cwd))
    try:
        loop.consume(_until_reject(results) if stop_at_reject else results)
        loop.end_part(first + len(items))
    except BaseException:
        writer.abort()
        raise
    return GroupResult(group, first + len(items), tuple(writer.shards), loop.build_table(),
                       tuple(loop.rejects()), tuple(sorted(writer.image_types)))


def _until_reject(results: Iterable[Record | Reject]) -> Iterator[Record | Reject]:
    """Results up to the first reject, included: the driver stops the run on it."""
    for result in results:
        yield result
        if isinstance(result, Reject):
            return


def commit_group(folder: Path, result: GroupResult, shards: list[ShardInfo],
                 stem: str) -> None:
    """Move a group's shards to their final names (`<stem>-NNNNN.tar`, numbered after
    `shards`, to which they are appended)."""
    source = groups_folder(folder) / f"{result.group:07d}"
    missing = [shard.name for shard in result.shards if not (source / shard.name).is_file()]
    if missing:
        raise DestinationError(
            f"{source / missing[0]}: a Ray task wrote this shard, but it is not here; with "
            "--shard-samples the tasks write into DST, so mount DST at the same path on every "
            "node (or drop --shard-samples to let the driver write), then rerun with --resume")
    for shard in result.shards:
        final = ShardInfo(shard_name(len(shards), stem), shard.num_samples, shard.num_bytes,
                          shard.sha256)
        os.replace(source / shard.name, folder / final.name)
        shards.append(final)
    if result.shards:
        fsync_dir(folder)
    shutil.rmtree(source, ignore_errors=True)


def written_groups(folder: Path, items: Sequence[SourceItem], start: int, size: int,
                   options: EncodeOptions, max_bytes: int, workers: int | None,
                   address: str | None, stop_at_reject: bool) -> Iterator[GroupResult]:
    """Run the group tasks on Ray; results in group order."""
    from packer.conversion.ray import map_ordered_ray

    func: Callable[[tuple[int, int, Sequence[SourceItem]]], GroupResult] = partial(
        write_group, folder=str(folder.resolve()), options=options, max_bytes=max_bytes,
        cwd=os.getcwd(), stop_at_reject=stop_at_reject)
    return map_ordered_ray(func, plan_groups(items, start, size), workers, address)


