"""The logic of scripts/bench_read.py: pack once, time DataLoaders, compare, tabulate.

Every loader case (ours and the baselines) reads the same images through the same
DataLoader settings; two more cases time decode + resize alone on one core (ours
and the PIL pipeline, same bytes), which separates the codec from the loader. Runs
are interleaved (run 1 of every case, then run 2, ...) so the noise of a shared
machine falls on all cases alike, and the table shows medians. A loader's clock
starts at its first batch (after `warmup_epochs` untimed epochs): worker start-up is
not counted; the fast cases (raw bytes, npy) may time more epochs (`raw_epochs`), as an
epoch of theirs lasts well under a second.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psutil
from torch.utils.data import DataLoader

from devtools.bench import baselines as base
from devtools.bench.augment import augment_cases, cropped_decode_back_on
from devtools.bench.fields import (
    FIELD_FORMATS,
    FIELD_TYPES,
    field_cases,
    field_copy,
    field_manifest,
)
from devtools.bench.mix import mix_cases
from devtools.bench.peer_cases import (
    baseline_cases,
    folder_and_stock_cases,
    notes,
    our_peer_cases,
    peer_cases,
)
from packer.core.fields import FieldSpec
from packer.core.index import INDEX_NAME, read_index
from packer.source.scan import scan
from readers.decoding.decode import decode as decode_sample

Progress = Callable[[str], None]
JPEG_FORMATS = ("wds", "lmdb", "hdf5")
FORMATS = (*JPEG_FORMATS, "npy")
SUITES = ("all", "peers")
PEER_FORMATS = ("wds", "lmdb", "npy")  # what the peers suite reads
PEER_FIELD_FORMATS = ("wds", "lmdb")
# (baseline id or None for an absolute rate, required factor)
Target = tuple[str | None, float]


@dataclass(frozen=True)
class Settings:
    """What to measure and how."""

    src: Path
    work: Path
    formats: tuple[str, ...] = FORMATS
    runs: int = 3
    count: int | None = None  # None: every image of src
    size: tuple[int, int] = (224, 224)
    batch_size: int = 64
    num_workers: int = 2
    epochs: int = 2  # timed epochs a run
    warmup_epochs: int = 0  # untimed epochs before them (worker start-up, caches, lazy opens)
    raw_epochs: int | None = None  # timed epochs of the fast cases (raw, npy); None: epochs
    suite: str = "all"  # "peers": devtools.bench.peer_cases only


@dataclass
class Case:
    """One reader to time; `make` builds its dataset, or measures itself (memcpy).

    Two rates per run: images per wall-clock second (what the targets are about) and
    images per CPU-second of the main process and its workers together, which other
    tenants of a shared machine disturb far less: compare ratios of those when the
    wall-clock spread is wide.
    """

    id: str
    reader: str
    fmt: str
    decode: str
    make: Callable[[], Any]
    shuffle: bool = False
    targets: tuple[Target, ...] = ()
    collate: Callable[[Any], Any] | None = None  # the DataLoader's collate_fn; None: default
    workers: int | None = None  # num_workers, if not the settings' one
    sampler: Callable[[Any], Any] | None = None  # the DataLoader's sampler, built from the dataset
    own_loader: bool = False  # make builds the loader itself (a peer's recommended one)
    rates: list[float] = field(default_factory=list)
    cpu_rates: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Median images per wall-clock second."""
        return statistics.median(self.rates) if self.rates else math.nan

    @property
    def cpu_median(self) -> float:
        """Median images per CPU-second (all processes of the loader together)."""
        return statistics.median(self.cpu_rates) if self.cpu_rates else math.nan


def pack_all(settings: Settings, progress: Progress) -> tuple[Path, dict[str, Path]]:
    """The source (a subset under --quick) and each packed copy, built once under work."""
    src = settings.src
    total = len(scan(src).items)
    count = min(settings.count or total, total)
    tag = settings.work / f"{src.name}-{count}"
    if count < total:
        src = subset_folder(src, tag / "src", count)
    packed = {fmt: pack(src, tag / fmt, fmt, count, settings, progress)
              for fmt in settings.formats}
    field_formats = FIELD_FORMATS if settings.suite == "all" else PEER_FIELD_FORMATS
    for fmt in (f for f in field_formats if f in packed):  # devtools.bench.fields
        manifest = field_manifest(src, tag / "fields.jsonl")
        pack(manifest, field_copy(packed[fmt]), fmt, count, settings, progress, FIELD_TYPES)
    return src, packed


def subset_folder(src: Path, dst: Path, count: int) -> Path:
    """Symlinks to an even spread of `count` images of src, classes kept."""
    items = scan(src).items
    step = len(items) / count
    chosen = [items[int(i * step)] for i in range(count)]
    if dst.exists() and sum(1 for _ in dst.rglob("*.*")) == count:
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    for item in chosen:
        link = dst / Path(item.path).relative_to(src)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(item.path).resolve())
    return dst


def pack(src: Path, dst: Path, fmt: str, count: int, settings: Settings,
         progress: Progress, fields: tuple[FieldSpec, ...] = ()) -> Path:
    """`pack convert` src into dst unless a complete copy of `count` samples is there
    (with these `--field` types: one packed with others is packed again)."""
    if (dst / INDEX_NAME).exists() and read_index(dst).num_samples == count and \
            set(fields) <= set(read_index(dst).fields):
        return dst
    shutil.rmtree(dst, ignore_errors=True)
    extra = [f"--field={spec.name}:{spec.type}" for spec in fields]
    if fmt == "npy":
        height, width = settings.size
        extra += ["--size", f"{height}x{width}", "--fit", "stretch"]
    if fmt == "wds":  # ~16 shards, so stock webdataset can give each worker several
        extra += ["--shard-samples", str(max(1, math.ceil(count / 16)))]
    progress(f"packing {count} images as {fmt} into {dst} ...")
    command = [sys.executable, "-c", "from pack_cli import main; main()", "convert",
               str(src), str(dst), "--to", fmt, "-q", *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"packing {fmt} failed ({' '.join(command[3:])}):\n{done.stderr}")
    progress(done.stdout.strip())
    return dst


def build_cases(settings: Settings, src: Path, packed: dict[str, Path]) -> list[Case]:
    """Baselines first, then ours for every packed format (the peers suite: its own)."""
    if settings.suite == "peers":
        return baseline_cases(Case, settings, src, packed) + \
            our_peer_cases(Case, settings, packed)
    size = settings.size
    cases = folder_and_stock_cases(Case, size, src, packed)
    if "npy" in packed:
        npy = packed["npy"]
        cases.append(Case("memmap", "naive np.load memmap (c)", "npy", "HWC view",
                          lambda: base.NaiveMemmapDataset(npy / "images.npy",
                                                          npy / "labels.npy"), shuffle=True))
        cases.append(Case("memcpy", "memcpy, 1 thread (d)", "npy", "bytes",
                          lambda: base.memcpy_rate(npy / "images.npy", settings.batch_size,
                                                   settings.epochs)))
        cases += peer_cases(Case, settings, src, packed)
    cases += decode_cases(src, size)
    for fmt, path in packed.items():
        cases += our_cases(fmt, path, size)
    return cases + augment_cases(Case, src, packed, size, sample_bytes(src),
                                 base.one_thread_rate, settings.num_workers) \
        + mix_cases(Case, settings, packed) + field_cases(Case, packed, size)


def sample_bytes(src: Path, count: int = 1000) -> list[bytes]:
    """An even spread of up to `count` of src's files, in memory."""
    items = scan(src).items
    step = max(1, len(items) // count)
    return [Path(item.path).read_bytes() for item in items[::step][:count]]


def decode_cases(src: Path, size: tuple[int, int], count: int = 1000) -> list[Case]:
    """Decode + resize alone on one core: ours against the PIL pipeline, same bytes."""
    samples = sample_bytes(src, count)
    shown = f"rgb8 {size[0]}x{size[1]}"
    pil = partial(base.pil_bytes_to_tensor, size=size)
    ours = partial(decode_sample, mode="rgb8", size=size)
    return [
        Case("pil-1t", "PIL open+resize, 1 thread", "bytes", shown,
             lambda: base.one_thread_rate(samples, pil)),
        Case("decode-1t", "readers decode, 1 thread", "bytes", shown,
             lambda: base.one_thread_rate(samples, ours), targets=(("pil-1t", 3.0),)),
    ]


def our_cases(fmt: str, path: Path, size: tuple[int, int]) -> list[Case]:
    """Both datasets, rgb8 and raw; map-style also with its chunk cache off."""
    from readers import PackedDataset, PackedIterableDataset, collate

    jpeg = fmt != "npy"
    rgb_targets: tuple[Target, ...] = (
        (("pil", 3.0),) if jpeg else ((None, 10_000), ("memmap", 1.6), ("memcpy", 0.85)))
    rgb = ("rgb8", size if jpeg else None, f"rgb8 {size[0]}x{size[1]}" if jpeg
           else "rgb8 (stored)", rgb_targets)
    raw = ("raw", None, "raw", ((None, 30_000),))
    readers = [("PackedDataset", PackedDataset, {}, True),
               ("PackedDataset max_cache_bytes=0", PackedDataset, {"max_cache_bytes": 0}, True),
               ("PackedIterableDataset", PackedIterableDataset, {}, False)]
    cases = []
    for decode, decode_size, shown, targets in (rgb, raw):
        for name, cls, options, shuffle in readers:
            make = _factory(cls, path, decode=decode, size=decode_size, **options)
            cases.append(Case(f"{fmt}-{name}-{decode}", name, fmt, shown, make, shuffle,
                              targets))
    # the documented fast path: recycled shared memory; for npy one gather, no copy
    for cls, workers in ((PackedDataset, None), (PackedIterableDataset, None),
                         *(() if jpeg else ((PackedDataset, 0),))):
        name = f"{cls.__name__} + readers.collate" + (", 0 workers" if workers == 0 else "")
        suffix = "" if workers is None else str(workers)
        cases.append(Case(f"{fmt}-{cls.__name__}-collate{suffix}-rgb8", name, fmt,
                          rgb[2], _factory(cls, path, size=rgb[1]), cls is PackedDataset,
                          rgb_targets, collate, workers))
    if not jpeg:  # raw rows gathered into one (B, N) batch
        cases.append(Case(f"{fmt}-PackedDataset-collate-raw", "PackedDataset + readers.collate",
                          fmt, "raw", _factory(PackedDataset, path, decode="raw"), True,
                          raw[3], collate))
    return cases


def _factory(cls: Any, path: Path, **kwargs: Any) -> Callable[[], Any]:
    return lambda: cls(path, **kwargs)


def loader_rate(dataset: Any, settings: Settings, shuffle: bool,
                collate: Callable[[Any], Any] | None = None,
                workers: int | None = None, sampler: Any = None,
                epochs: int | None = None) -> tuple[float, float]:
    """(samples per second, per CPU-second) over `epochs` (default: the settings')
    epochs after the warm-up ones, first batch to last."""
    workers = settings.num_workers if workers is None else workers
    loader = DataLoader(dataset, batch_size=settings.batch_size, shuffle=shuffle,
                        num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, sampler=sampler)
    return iterate_rate(loader, epochs or settings.epochs, (dataset, sampler),
                        settings.warmup_epochs)


def iterate_rate(loader: Any, epochs: int, epoch_setters: Sequence[Any] = (),
                 warmup: int = 0) -> tuple[float, float]:
    """(samples per second, per CPU-second) of `epochs` passes over `loader` after
    `warmup` untimed ones, from the first timed batch to the last; `set_epoch` of each
    of `epoch_setters` before each pass."""
    start: float | None = None
    cpu_start = 0.0
    samples = 0
    for epoch in range(warmup + epochs):
        for each in epoch_setters:
            if hasattr(each, "set_epoch"):
                each.set_epoch(epoch)
        for batch in loader:
            if epoch < warmup:
                continue
            if start is None:
                start, cpu_start = time.perf_counter(), tree_cpu_seconds()
                continue
            samples += len(batch["label"] if isinstance(batch, dict) else batch[1])
    if start is None:
        raise ValueError("the dataset is empty: nothing to measure")
    elapsed = time.perf_counter() - start
    cpu = tree_cpu_seconds() - cpu_start
    # CPU clocks tick in 10 ms steps: a tiny run can show none
    return samples / elapsed, samples / cpu if cpu > 0 else math.nan


def tree_cpu_seconds() -> float:
    """User + system CPU time of this process and its live children (the workers)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


def run_cases(cases: Sequence[Case], settings: Settings, progress: Progress) -> None:
    """Interleaved runs; each case's rates land in `case.rates` and `case.cpu_rates`.

    Cases may switch the cropped decode off (augment's -uncropped twins): it is back on
    afterwards, so a caller in the same process (the tests) keeps the extension."""
    try:
        for run in range(settings.runs):
            for case in cases:
                _run_case(case, run, settings, progress)
    finally:
        cropped_decode_back_on()


def _run_case(case: Case, run: int, settings: Settings, progress: Progress) -> None:
    made = case.make()
    sampler = case.sampler(made) if case.sampler is not None else None
    fast = case.decode.startswith("raw") or case.fmt == "npy"
    epochs = settings.raw_epochs if fast and settings.raw_epochs else settings.epochs
    if isinstance(made, tuple):
        wall, cpu = made
    elif case.own_loader:
        wall, cpu = iterate_rate(made, epochs, (), settings.warmup_epochs)
        del made  # stops its workers before the next case starts, here: not in a fork
        gc.collect()
    else:
        wall, cpu = loader_rate(made, settings, case.shuffle, case.collate, case.workers,
                                sampler, epochs)
    case.rates.append(wall)
    case.cpu_rates.append(cpu)
    progress(f"run {run + 1}/{settings.runs}  {case.reader:28} {case.fmt:6} "
             f"{case.decode:14} {wall:9,.0f} img/s {cpu:9,.0f} img/CPU-s")


def verdicts(case: Case, by_id: dict[str, Case]) -> list[tuple[str, bool]]:
    """Each target of a case as ('3.2x pil >= 3', met)."""
    out = []
    for baseline, factor in case.targets:
        if baseline is None:
            out.append((f"{case.median:,.0f} >= {factor:,.0f}", case.median >= factor))
        elif baseline in by_id:
            ratio = case.median / by_id[baseline].median
            out.append((f"{ratio:.2f}x {baseline} >= {factor:.3g}x", ratio >= factor))
    return out


# ratio columns: (heading, the baseline of a raw row, of a decoded row, formats shown on)
RATIOS = (("PIL ImageFolder", None, "pil", None), ("stock wds", "wds-stock-raw", "wds-stock", None),
          ("litdata", "litdata-raw", "litdata-rgb8", None),
          ("mosaic", "mosaic-raw", "mosaic-rgb8", None),
          ("memmap", None, "memmap", ("npy",)), ("memcpy", "memcpy", "memcpy", ("npy",)))


def ratio_cell(case: Case, by_id: dict[str, Case], raw_id: str | None, rgb_id: str | None,
               formats: tuple[str, ...] | None) -> str:
    """'wall / CPU' ratio of case against the column's baseline of the same decode."""
    key = raw_id if case.decode.startswith("raw") else rgb_id
    if case.decode == "bytes" or key is None or key not in by_id or key == case.id or \
            (formats is not None and case.fmt not in formats):
        return ""
    other = by_id[key]
    return f"{case.median / other.median:.2f} / {case.cpu_median / other.cpu_median:.2f}"


def markdown(cases: Sequence[Case], settings: Settings) -> str:
    """The results as a markdown table: medians, spread, ratios and targets."""
    by_id = {case.id: case for case in cases}
    columns = [column for column in RATIOS if {column[1], column[2]} & set(by_id)]
    head = ["reader", "format", "decode", "img/s median (min-max)", "img/CPU-s",
            *[f"vs {column[0]} (wall / CPU)" for column in columns], "targets (wall)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        rate = f"{case.median:,.0f} ({min(case.rates):,.0f}-{max(case.rates):,.0f})"
        cells = [ratio_cell(case, by_id, *column[1:]) for column in columns]
        marks = "; ".join(f"{text} {'ok' if met else 'MISS'}"
                          for text, met in verdicts(case, by_id)) or "baseline"
        lines.append("| " + " | ".join([case.reader, case.fmt, case.decode, rate,
                                        f"{case.cpu_median:,.0f}", *cells, marks]) + " |")
    cpus = len(os.sched_getaffinity(0))
    lines.append("")
    raw = f" ({settings.raw_epochs} for raw and npy)" if settings.raw_epochs else ""
    warm = f" after {settings.warmup_epochs} warm-up" if settings.warmup_epochs else ""
    lines.append(f"{settings.runs} run(s), {settings.epochs} timed epochs{raw}{warm} each, batch "
                 f"{settings.batch_size}, {settings.num_workers} workers, {cpus} CPUs; "
                 "ratios are of medians, each against the baseline of the same decode "
                 "(raw or rgb8); img/CPU-s counts the main process and workers")
    lines += [f"\n{note}" for note in notes()]
    return "\n".join(lines)
