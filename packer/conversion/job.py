"""convert(src, dst, fmt): scan -> encode (threads, or Ray) -> one writer -> index.json last."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from packer import formats
from packer.conversion.destination import prepare, refuse_inside_source, write_errors
from packer.conversion.executors import (
    EXECUTORS,
    Executor,
    batch_size,
    check_executor,
    encode_ordered,
)
from packer.conversion.identity import JOB_KEY, JobIdentity, changed_since, identify, save_identity
from packer.conversion.journal import Journal, Progress, ResumeRefused
from packer.conversion.parallel import CommittedShards, written_groups
from packer.conversion.writing import OnBadInput, WriterLoop, rejected
from packer.core.field_table import FieldRowsBuilder, present_counts
from packer.core.index import REJECTS_NAME, Index, SampleTable, ShardInfo, save_table, write_index
from packer.core.record import Record, Reject, SourceItem
from packer.encode import EncodeOptions
from packer.errors import SourceError
from packer.formats.base import ShardOptions, Writer, WriterPlan
from packer.imaging.resize import load_torch
from packer.source.fields import FieldChoice
from packer.source.kinds import Source
from packer.source.scan import scan
from packer.storage.files import sha256_file, write_atomic

T = TypeVar("T")


@dataclass(frozen=True)
class ConvertOptions:
    """How a conversion runs (as opposed to what it stores: EncodeOptions)."""

    # Given limits, or the default: 256MB and at least MIN_SHARDS shards (ShardOptions)
    shards: ShardOptions = field(default_factory=ShardOptions.spread)
    workers: int | None = None
    on_error: OnBadInput = "skip"
    resume: bool = False
    overwrite: bool = False
    executor: Executor = "local"
    ray_address: str | None = None
    # Which per-sample fields the source gives: all, none, a few
    fields: FieldChoice = field(default_factory=FieldChoice)
    # The dataset's name, which wds shard files carry (<name>-00000.tar) so that caches
    # keyed by file name keep datasets apart; None: DST's name without its suffix.
    name: str | None = None
    # Keep the first of samples whose stored bytes are equal (by key: the scan's order);
    # list the others in rejects.jsonl, naming the key kept.
    drop_duplicates: bool = False

    def __post_init__(self) -> None:
        if self.on_error not in ("skip", "fail"):
            raise ValueError(f"on_error must be skip or fail, not {self.on_error!r}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite exclude each other")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be local or ray, not {self.executor!r}")
        if self.executor != "ray" and self.ray_address is not None:
            raise ValueError("--ray-address needs --executor ray")
        if self.executor == "ray" and self.workers == 0:
            raise ValueError("--workers 0 encodes in-process; it does not combine with "
                             "--executor ray (omit --workers to use every cluster CPU)")

    @property
    def num_workers(self) -> int:
        return os.cpu_count() or 1 if self.workers is None else self.workers


def effective_options(fmt: str, options: EncodeOptions,
                      pixels_in: tuple[int, int] | None = None) -> EncodeOptions:
    """npy always stores raw pixels at a fixed size (256x256 unless given). `pixels_in`: the
    source is an npy dataset of raw pixels of that size, which npy keeps unless given; the
    other formats store images, PNG unless --encode says otherwise."""
    if fmt != "npy":
        if options.pixels:
            raise ValueError("raw pixels are only stored by the npy format")
        if pixels_in is not None and options.codec is None:
            return dataclasses.replace(options, codec="png")
        return options
    if options.resize is not None or options.codec is not None:
        raise ValueError("npy stores raw pixels: use --size HxW, not --resize or --encode")
    size = options.size or pixels_in or (256, 256)
    return dataclasses.replace(options, pixels=True, size=size)


def convert_local(src: str | Path, dst: str | Path, fmt: str,
                  options: EncodeOptions | None = None, run: ConvertOptions | None = None,
                  progress: Callable[[int], None] | None = None,
                  on_total: Callable[[int], None] | None = None,
                  on_part: Callable[[tuple[ShardInfo, ...]], None] | None = None) -> Index:
    """Pack `src` into the folder `dst` in format `fmt`; returns the complete index.

    `on_part` receives the finished shards each time the writer ends a part (the upload
    of a URL DST sends them as they come). A URL DST goes through `packer.convert`.
    """
    module = formats.load(fmt)
    asked = options or EncodeOptions()
    options = effective_options(fmt, asked)  # refuse bad options before the scan
    run = run or ConvertOptions()
    check_executor(run.executor, run.ray_address)  # Ray installed and answering, or stop here
    if options.pixels:
        load_torch()  # npy resizes with torch: import it up front
    folder = Path(dst)
    refuse_inside_source(Path(src), folder)
    source, options, job_id = plan_job(src, fmt, asked, run)
    if run.on_error == "fail" and source.rejects:
        raise rejected(source.rejects[0])
    with write_errors(folder):  # disk full, permissions: one line that says what to do
        complete = prepare(folder, run.resume, run.overwrite)
        journal = Journal(folder)
        if complete:  # --resume of finished work: a no-op if it is this job
            return journal.finish(job_id)
        done = resume_point(journal, job_id, run.resume, folder)
        limits = run.shards.for_inputs(len(source.items))  # a function of the inputs alone
        plan = WriterPlan(folder, len(source.items), options.size, limits, done.num_samples,
                          done.shards, run.name, source.fields)
        # Ray tasks write the shards: wds on Ray with --shard-samples, into a folder (a URL
        # DST: the driver writes and uploads); they do not write fields, nor see each
        # other's samples (duplicates)
        parallel = module.GROUPS_INPUTS and run.executor == "ray" and \
            run.shards.max_samples is not None and on_part is None and not source.fields \
            and not run.drop_duplicates
        writer: Writer = (CommittedShards(folder, done.shards, run.name) if parallel
                          else module.open_writer(plan))
        if on_total is not None:
            on_total(len(source.items))
        if progress is not None:
            progress(done.src_stop)
        job = WriterLoop(writer, journal, done, run.on_error, progress, on_part,
                         group=limits.max_samples if module.GROUPS_INPUTS else None,
                         path_of=lambda position: source.items[position].path,
                         drop_duplicates=run.drop_duplicates)
        with aborted_on_failure(writer), source_open(source):
            # The generators are closed here, whatever ends the loop (closed_after says why)
            if isinstance(writer, CommittedShards):  # parallel: Ray tasks write the shards
                assert limits.max_samples is not None  # `parallel` checked it
                with closed_after(written_groups(
                        folder, source.items, done.src_stop, limits.max_samples, options,
                        limits.max_bytes, run.workers, run.ray_address,
                        stop_at_reject=run.on_error == "fail")) as groups:
                    job.commit_groups(groups, writer.commit)
            else:
                with closed_after(encoded(source.items[done.src_stop :], options, run.workers,
                                          run.executor, run.ray_address)) as records:
                    job.consume(records)
            shards = writer.finish(job.build_table())
        return finalize(folder, fmt, source, options, job, shards, job_id, journal)


def plan_job(src: str | Path, fmt: str, asked: EncodeOptions, run: ConvertOptions
             ) -> tuple[Source, EncodeOptions, JobIdentity]:
    """Scan SRC; return it, the options as stored and the job's identity: what shapes the
    output (format, encode and shard options), not how the work runs (workers, executor)."""
    source = scan(src, run.fields)
    if source.archive is not None and run.executor == "ray":
        raise SourceError(f"{src}: an archive, webdataset or Parquet SRC is read by the "
                          "local executor only; drop --executor ray, or convert it to a "
                          "folder on a shared mount first")
    pixels_in = None if source.origin is None else source.origin.pixel_size
    options = effective_options(fmt, asked, pixels_in)  # npy keeps an npy source's size
    settings: dict[str, Any] = {"format": fmt, "encode": options.to_json(),
                                "shards": run.shards.to_json()}
    if source.fields:  # only with fields, so a job without them keeps its fingerprint
        settings["fields"] = [spec.to_json() for spec in source.fields]
    if run.drop_duplicates:  # only when asked, so other jobs keep their fingerprints
        settings["drop_duplicates"] = True
    if run.fields is not None and run.fields.label is not None:  # a webdataset's --label
        settings["label"] = run.fields.label
    if source.extra:  # a COCO file's sha256: resume refuses an edited annotations file
        settings["source_extra"] = source.extra
    return source, options, identify(source, settings)


def encoded(items: Sequence[SourceItem], options: EncodeOptions, workers: int | None,
            executor: Executor = "local", address: str | None = None) -> Iterator[Record | Reject]:
    """Encode items in order on `workers` threads, or Ray; a task is a batch of inputs."""
    size = batch_size(options)
    # Slices of the scan's SourceItems are views: each batch builds its SourceItem
    # objects in the worker, and pickles (Ray) with only its own keys and paths.
    batches = cast(Iterator[list[SourceItem]],
                   (items[i : i + size] for i in range(0, len(items), size)))
    with closed_after(encode_ordered(batches, options, workers, executor, address)) as ordered:
        for batch in ordered:  # closing this generator closes the pool's (convert_local)
            yield from batch


@contextlib.contextmanager
def source_open(source: Source) -> Iterator[None]:
    """A packed or archive SRC opened for the block, closed whatever ends it: a source that
    cannot be read (or an archive changed since the scan) stops here, not per sample."""
    try:
        if source.origin is not None:
            source.origin.open()
        if source.archive is not None:
            source.archive.open()
        yield
    finally:
        if source.origin is not None:
            source.origin.close()
        if source.archive is not None:
            source.archive.close()


@contextlib.contextmanager
def aborted_on_failure(writer: Writer) -> Iterator[None]:
    """If the block fails: the writer aborted (partial files removed), the block's error raised."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            writer.abort()
        raise


@contextlib.contextmanager
def closed_after(iterator: Iterator[T]) -> Iterator[Iterator[T]]:
    """`iterator`, closed when the block ends if it can be (a generator; map() cannot): its
    `finally` (a thread pool's shutdown) runs here and now, not where the garbage collector
    next runs, which can be inside a new thread's start, deadlocked on threading's lock."""
    try:
        yield iterator
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def resume_point(journal: Journal, job: JobIdentity, resume: bool, folder: Path) -> Progress:
    """Start fresh, or load what an interrupted run of the same job made durable."""
    if not resume or not journal.exists():
        journal.start(job.fingerprint)
        save_identity(journal.state, job)
        return Progress()
    if journal.fingerprint() != job.fingerprint:
        raise ResumeRefused(
            f"{folder}: the source or the options changed since the interrupted run"
            f"{changed_since(journal.state, job)}; rerun with the same source and options "
            "to resume, or --overwrite to start over"
        )
    parts = journal.read_parts()
    keep = next((number for number, part in enumerate(parts)  # up to the first damaged part
                 if not all(_shard_intact(folder, shard) for shard in part["shards"])), len(parts))
    journal.truncate(keep)
    return journal.load(parts[:keep])


def _shard_intact(folder: Path, shard: dict[str, object]) -> bool:
    path = folder / str(shard["name"])
    return path.is_file() and sha256_file(path) == shard["sha256"]


def finalize(folder: Path, fmt: str, source: Source, options: EncodeOptions, job: WriterLoop,
             shards: tuple[ShardInfo, ...], job_id: JobIdentity, journal: Journal) -> Index:
    """Write the table and rejects, then index.json last (with the job's identity, for a
    later --resume), then drop the resume state."""
    rejects = sorted(source.rejects + source.inherited + job.rejects(),
                     key=lambda r: (r.position, r.path))
    table = job.build_table()
    if source.fields and table.fields is None:  # every input rejected: an empty field table
        table = SampleTable(table.rows, table.keys_blob, FieldRowsBuilder().build())
    save_table(folder, table)
    lines = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects)
    write_atomic(folder / REJECTS_NAME, lines.encode("utf-8"))
    extra: dict[str, Any] = {JOB_KEY: job_id.to_json(),
                             **getattr(job.writer, "index_extra", {}),  # wds: the wids index
                             **source.extra}  # COCO: the categories
    if source.origin is not None:
        extra["source"] = source.origin.lineage(options)
    index = Index(format=fmt, num_samples=len(table), class_names=source.class_names,
                  shards=tuple(shards), encode=options.to_json(), num_rejected=len(rejects),
                  num_ignored=source.num_ignored, fields=source.fields, extra=extra,
                  image_size=options.size if options.pixels else None,
                  field_counts=present_counts(source.fields, table) if source.fields else ())
    index = write_index(folder, index)  # as written: with the table's digest
    journal.remove()
    return index
