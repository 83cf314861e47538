"""The one writer loop: records and rejects in, parts out (journalled where there is a journal).

Every path that writes records into a format Writer goes through `WriterLoop`: a local
or remote conversion (`convert_local`; a URL DST stages locally through the same call)
and each Ray task of a parallel wds run, whose shards the driver then commits group by
group, also here (`commit_groups`). So the rules of a shard's end, of a record the
format cannot store and of a part's rows exist once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from packer.conversion.journal import Journal, Progress
from packer.core.index import ShardInfo
from packer.core.record import Record, Reject
from packer.core.table import SampleTable, TableBuilder
from packer.errors import BadInputError, UnstorableRecord
from packer.formats.base import Writer

OnBadInput = Literal["skip", "fail"]  # an input that cannot be packed: listed in rejects, or fatal
PROGRESS_EVERY = 64


@dataclass(frozen=True)
class GroupResult:
    """What a Ray task of a parallel wds run sends back: no image bytes, only what the
    driver commits as one part."""

    group: int
    src_stop: int
    shards: tuple[ShardInfo, ...]
    table: SampleTable  # the group's rows, as the task's WriterLoop built them
    rejects: tuple[Reject, ...]
    image_types: tuple[str, ...] = ()


class WriterLoop:
    """Route records and rejects, end parts, journal them.

    Runs once per sample in the main thread (or in a Ray task), so it stays lean: one
    table row per sample (the part's; parts join the whole table when they end) and
    progress reported every PROGRESS_EVERY samples. With `group` (wds --shard-samples),
    a shard also ends every `group` inputs, so shard boundaries do not depend on who
    writes the shards (Ray tasks or this loop): input i belongs to group i // `group`.
    Without a `journal` (a Ray task), ended parts are kept but not journalled.
    """

    def __init__(self, writer: Writer, journal: Journal | None, done: Progress,
                 on_error: OnBadInput, progress: Callable[[int], None] | None = None,
                 on_part: Callable[[tuple[ShardInfo, ...]], None] | None = None,
                 group: int | None = None,
                 path_of: Callable[[int], str] | None = None,
                 drop_duplicates: bool = False) -> None:
        self.writer = writer
        self.path_of = path_of  # an input's path, for a sample the format cannot store
        self.group = group
        self.part_group = -1  # the group of the current part's samples (-1: none yet)
        self.on_part = on_part
        self.journal = journal
        self.done = done
        self.on_error = on_error
        self.progress = progress
        self.table = TableBuilder()
        for table in done.tables:
            self.table.extend(table)
        self.part = TableBuilder()
        self.part_rejects: list[Reject] = []
        self.num_parts = len(done.tables)
        # digest -> key of the sample kept (--drop-duplicates), resumed parts' included
        self.kept: dict[bytes, str] | None = None
        if drop_duplicates:
            self.kept = {}
            for table in done.tables:
                for i in range(len(table)):
                    self.kept.setdefault(table.digest(i), table.key(i))

    def consume(self, results: Iterable[Record | Reject]) -> None:
        progress = self.progress
        unreported = 0
        for result in results:
            if isinstance(result, Reject):
                self.reject(result)
            else:
                self.add(result)
            unreported += 1
            if unreported == PROGRESS_EVERY and progress is not None:
                progress(unreported)
                unreported = 0
        if unreported and progress is not None:
            progress(unreported)

    def reject(self, reject: Reject) -> None:
        if self.on_error == "fail":
            raise rejected(reject)
        self.part_rejects.append(reject)

    def add(self, record: Record) -> None:
        if self.kept is not None and self.duplicate(self.kept, record):
            return
        group = -1 if self.group is None else record.position // self.group
        if group != self.part_group:  # a new group of inputs starts a new shard
            if self.part_group >= 0:
                self.end_part(record.position)
            self.part_group = group
        elif self.writer.part_full(len(record.data) + len(record.fields)):
            self.end_part(record.position)
        try:
            location = self.writer.add(record)
        except UnstorableRecord as exc:
            path = self.path_of(record.position) if self.path_of else record.key
            self.reject(Reject(record.position, path, str(exc)))
            return
        if self.kept is not None:  # kept once stored: an unstorable first copy is a reject
            self.kept.setdefault(record.digest, record.key)
        self.part.add(record.key, record.label, location.offset, location.size, record.digest)
        if record.fields:
            self.part.add_fields(record.fields, location.fields_offset, location.fields_size)

    def duplicate(self, kept_keys: dict[bytes, str], record: Record) -> bool:
        """--drop-duplicates: list a record whose stored bytes an earlier stored sample has
        (not an error, whatever --on-error says: the run was asked to drop it)."""
        kept = kept_keys.get(record.digest)
        if kept is None or kept == record.key:
            return False
        path = self.path_of(record.position) if self.path_of else record.key
        self.part_rejects.append(Reject(record.position, path,
                                        f"duplicate of {kept!r} (the same stored bytes)"))
        return True

    def end_part(self, src_stop: int) -> None:
        self.writer.end_part()
        if self.on_part is not None:  # e.g. upload the finished shards (a URL DST)
            self.on_part(tuple(getattr(self.writer, "shards", ())))
        part = self.part.build()
        if len(self.table):
            self.table.extend(part)
        else:  # the first part: its builder goes on as the table's, no copy of its rows
            self.table = self.part
        self.done.rejects += self.part_rejects
        if self.journal is not None and self.writer.resumable:
            self.done.src_stop = src_stop
            self.done.num_samples = len(self.table)
            self.done.shards = tuple(getattr(self.writer, "shards", ()))
            self.journal.record_part(self.num_parts, self.done, part, self.part_rejects)
            self.num_parts += 1
        self.part = TableBuilder()
        self.part_rejects = []

    def commit_groups(self, results: Iterable[GroupResult],
                      commit: Callable[[GroupResult], None]) -> None:
        """Commit the shards Ray tasks wrote (a parallel wds run), group by group:
        each group is one part. `commit` moves a group's shards to their final names."""
        for result in results:
            for reject in result.rejects:
                self.reject(reject)
            commit(result)
            self.part.extend(result.table)
            if self.progress is not None:
                self.progress(result.src_stop - self.done.src_stop)
            self.end_part(result.src_stop)

    def rejects(self) -> list[Reject]:
        """The rejects of the ended parts and of the current one."""
        return self.done.rejects + self.part_rejects

    def build_table(self) -> SampleTable:
        """Every sample so far: resumed parts, ended parts and the current one."""
        if len(self.part) and not len(self.table):  # one part (lmdb, hdf5): no copy
            self.table, self.part = self.part, TableBuilder()
        elif len(self.part):
            self.table.extend(self.part.build())
            self.part = TableBuilder()
        return self.table.build()


def rejected(reject: Reject) -> BadInputError:
    """The error `--on-error fail` stops with."""
    return BadInputError(f"{reject.path}: {reject.reason}; fix or remove the file, "
                         "or pass --on-error skip to list it in rejects.jsonl")
