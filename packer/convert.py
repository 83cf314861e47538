"""convert(src, dst, fmt): scan -> encode (process pool) -> one writer -> index.json last."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from packer import formats
from packer.atomic import write_atomic
from packer.destination import prepare, refuse_inside_source
from packer.encode import EncodeOptions, encode_batch
from packer.errors import BadInputError
from packer.executors import map_ordered
from packer.formats.base import ShardOptions, Writer, WriterPlan
from packer.index import (
    REJECTS_NAME,
    Index,
    SampleTable,
    ShardInfo,
    TableBuilder,
    save_table,
    write_index,
)
from packer.journal import Journal, Progress, ResumeRefused, fingerprint
from packer.record import Record, Reject, SourceItem
from packer.scan import Source, scan
from packer.verify_hash import sha256_file

OnError = Literal["skip", "fail"]
DEFAULT_NPY_SIZE = (256, 256)
PROGRESS_EVERY = 64


@dataclass(frozen=True)
class ConvertOptions:
    """How a conversion runs (as opposed to what it stores: EncodeOptions)."""

    shards: ShardOptions = field(default_factory=ShardOptions)
    workers: int | None = None
    on_error: OnError = "skip"
    resume: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.on_error not in ("skip", "fail"):
            raise ValueError(f"on_error must be skip or fail, not {self.on_error!r}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")

    @property
    def num_workers(self) -> int:
        return os.cpu_count() or 1 if self.workers is None else self.workers


def effective_options(fmt: str, options: EncodeOptions) -> EncodeOptions:
    """npy always stores raw pixels at a fixed size (256x256 unless given)."""
    if fmt != "npy":
        if options.pixels:
            raise ValueError("raw pixels are only stored by the npy format")
        return options
    if options.resize is not None or options.codec is not None:
        raise ValueError("npy stores raw pixels: use --size HxW, not --resize or --encode")
    return dataclasses.replace(options, pixels=True, size=options.size or DEFAULT_NPY_SIZE)


def convert(src: str | Path, dst: str | Path, fmt: str,
            options: EncodeOptions | None = None, run: ConvertOptions | None = None,
            progress: Callable[[int], None] | None = None,
            on_total: Callable[[int], None] | None = None) -> Index:
    """Pack `src` into `dst` in format `fmt`; returns the index of the complete dataset."""
    module = formats.load(fmt)
    options = effective_options(fmt, options or EncodeOptions())
    run = run or ConvertOptions()
    folder = Path(dst)
    refuse_inside_source(Path(src), folder)
    source = scan(src)
    if run.on_error == "fail" and source.rejects:
        raise rejected(source.rejects[0])
    prepare(folder, run.resume, run.overwrite)
    journal = Journal(folder)
    settings = {"format": fmt, "encode": options.to_json(),
                "shards": dataclasses.asdict(run.shards)}
    done = resume_point(journal, fingerprint(source, settings), run.resume, module.FILES, folder)
    plan = WriterPlan(folder, len(source.items), options, run.shards, done.num_samples,
                      done.shards)
    writer = module.open_writer(plan)
    if on_total is not None:
        on_total(len(source.items))
    if progress is not None:
        progress(done.src_stop)
    job = _Job(writer, journal, done, run.on_error, progress)
    try:
        job.consume(encoded(source.items[done.src_stop :], options, run.num_workers))
        shards = writer.finish(job.build_table())
    except BaseException:
        writer.abort()
        raise
    return finalize(folder, fmt, source, options, job, shards)


def encoded(items: list[SourceItem], options: EncodeOptions,
            workers: int) -> Iterator[Record | Reject]:
    """Encode items in order on `workers` threads (see executors for why threads).

    A task is a batch: large for pass-through, where an image costs microseconds and
    per-task overhead would dominate; small when every image is decoded and resized,
    so the window of finished-but-unwritten pixels stays small.
    """
    size = batch_size(options)
    batches = (items[i : i + size] for i in range(0, len(items), size))
    for batch in map_ordered(partial(encode_batch, options=options), batches, workers):
        yield from batch


def batch_size(options: EncodeOptions) -> int:
    if options.transforms or options.pixels:
        return 8
    return 64 if options.check == "none" else 32


class _Job:
    """The writer loop: route records and rejects, end parts, journal them.

    Runs once per sample in the main thread, so it stays lean: one table row per
    sample (the part's; parts join the whole table when they end) and progress
    reported every PROGRESS_EVERY samples.
    """

    def __init__(self, writer: Writer, journal: Journal, done: Progress, on_error: OnError,
                 progress: Callable[[int], None] | None) -> None:
        self.writer = writer
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

    def consume(self, results: Iterator[Record | Reject]) -> None:
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
        if self.writer.part_full(len(record.data)):
            self.end_part(record.position)
        location = self.writer.add(record)
        self.part.add(record.key, record.label, location.offset, location.size, record.digest)

    def end_part(self, src_stop: int) -> None:
        self.writer.end_part()
        part = self.part.build()
        self.table.extend(part)
        self.done.rejects += self.part_rejects
        if self.writer.resumable:
            self.done.src_stop = src_stop
            self.done.num_samples = len(self.table)
            self.done.shards = tuple(getattr(self.writer, "shards", ()))
            self.journal.record_part(self.num_parts, self.done, part, self.part_rejects)
            self.num_parts += 1
        self.part = TableBuilder()
        self.part_rejects = []

    def build_table(self) -> SampleTable:
        """Every sample so far: resumed parts, ended parts and the current one."""
        if len(self.part):
            self.table.extend(self.part.build())
            self.part = TableBuilder()
        return self.table.build()


def rejected(reject: Reject) -> BadInputError:
    """The error `--on-error fail` stops with."""
    return BadInputError(f"{reject.path}: {reject.reason}; fix or remove the file, "
                         "or pass --on-error skip to list it in rejects.jsonl")


def resume_point(journal: Journal, job: str, resume: bool, files: tuple[str, ...],
                 folder: Path) -> Progress:
    """Start fresh, or load what an interrupted run of the same job made durable."""
    if not resume or not journal.exists():
        journal.start(job)
        return Progress()
    if journal.fingerprint() != job:
        raise ResumeRefused(
            f"{folder}: the source or the options changed since the interrupted run; "
            "rerun with --overwrite to start over"
        )
    parts = journal.read_parts()
    keep = len(parts)
    for number, part in enumerate(parts):
        if not all(_shard_intact(folder, shard) for shard in part["shards"]):
            keep = number
            break
    journal.truncate(keep)
    return journal.load(parts[:keep])


def _shard_intact(folder: Path, shard: dict[str, object]) -> bool:
    path = folder / str(shard["name"])
    return path.is_file() and sha256_file(path) == shard["sha256"]


def finalize(folder: Path, fmt: str, source: Source, options: EncodeOptions, job: _Job,
             shards: tuple[ShardInfo, ...]) -> Index:
    """Write the table and rejects, then index.json last, then drop the resume state."""
    rejects = sorted(source.rejects + job.done.rejects + job.part_rejects,
                     key=lambda r: (r.position, r.path))
    table = job.build_table()
    save_table(folder, table)
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects)
    write_atomic(folder / REJECTS_NAME, lines.encode("utf-8"))
    index = Index(format=fmt, num_samples=len(table), class_names=source.class_names,
                  shards=tuple(shards), encode=options.to_json(), num_rejected=len(rejects),
                  num_ignored=source.num_ignored,
                  image_size=options.size if options.pixels else None)
    write_index(folder, index)
    job.journal.remove()
    return index
