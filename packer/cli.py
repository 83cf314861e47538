"""`pack`: the command line. Thin: parse, call the library, print, map errors to exit codes.

A PackError becomes one line on stderr and exit code 1; bad options exit 2 (click);
Ctrl-C exits 130 with a hint to resume.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, TypeVar

import click
from tqdm import tqdm

from packer.api import verify, verify_remote
from packer.conversion.destination import holds_complete
from packer.conversion.executors import EXECUTORS
from packer.conversion.job import ConvertOptions, convert
from packer.conversion.upload import convert_remote
from packer.dataset.describe import describe, wds_notes
from packer.dataset.remote import describe_remote, is_url, parse_storage_options
from packer.encode import EncodeOptions
from packer.errors import CTRL_C, DISTRIBUTION, PackError, install_line, interrupted
from packer.formats import FORMATS
from packer.formats.base import ShardOptions

F = TypeVar("F", bound=Callable[..., Any])
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30}


def parse_bytes(text: str) -> int:
    """'256MB' -> 256000000; plain numbers are bytes; fractions round to whole bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in UNITS:
        raise click.BadParameter(f"{text!r} is not a size like 256MB, 1GiB or 1000000")
    return int((Decimal(match.group(1)) * UNITS[unit]).to_integral_value(ROUND_HALF_UP))


def parse_size(text: str | None) -> tuple[int, int] | None:
    """'224x224' -> (224, 224); a single number means a square."""
    if text is None:
        return None
    parts = text.lower().split("x")
    if len(parts) not in (1, 2) or not all(re.fullmatch("[0-9]+", p) and int(p) > 0
                                           for p in parts):
        raise click.BadParameter(f"{text!r} is not a size like 256x256 (height x width)")
    height = int(parts[0])
    return (height, int(parts[-1]))


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn library errors into one line and an exit code, never a traceback."""
    try:
        yield
    except (KeyboardInterrupt, Exception) as exc:
        if interrupted(exc):  # also a Ctrl-C that a library wrapped in its own error (h5py)
            click.echo("interrupted: rerun the same command with --resume to continue",
                       err=True)
            sys.exit(130)
        if isinstance(exc, PackError):
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        if isinstance(exc, click.BadParameter):
            click.echo(f"error: {exc.message}", err=True)
            sys.exit(2)
        if isinstance(exc, ValueError):
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        raise


@contextmanager
def ctrl_c() -> Iterator[None]:
    """Make a Ctrl-C during a conversion a Ctrl-C, whatever the code it lands in makes of it.

    The SIGINT handler sets CTRL_C before raising KeyboardInterrupt, so when C code drops
    the KeyboardInterrupt for an error of its own (numpy loading a file, h5py converting
    strings) or Python can only print it (a weakref callback during a lazy import), the
    error still ends as Ctrl-C here, a broad `except` never turns it into a rejected
    input (packer.encode), and the next progress report raises it again. Found by
    scripts/soak.py.
    """
    CTRL_C.clear()

    def on_sigint(signum: int, frame: Any) -> None:
        CTRL_C.set()
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: Python delivers no signals here anyway
        previous = None
    try:
        with unprinted_ctrl_c(lambda: None):  # CTRL_C is set: the next report raises it
            yield
    except Exception as exc:
        if CTRL_C.is_set():
            raise KeyboardInterrupt from exc
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        CTRL_C.clear()  # a later conversion in this process starts afresh


@contextmanager
def unprinted_ctrl_c(on_drop: Callable[[], None]) -> Iterator[None]:
    """While active, a KeyboardInterrupt that Python can only print (raised in a weakref
    callback during a lazy import, in a __del__) calls `on_drop` instead of printing a
    traceback."""
    previous_hook = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            on_drop()
        else:
            previous_hook(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook


def run(argv: list[str] | None = None) -> None:
    """The `pack` console script: `main`, with a Ctrl-C that lands in click's own start-up,
    before any command runs, or in a weakref callback once a conversion has returned
    (tests/test_faults_kill.py caught Python printing that one), ending as quietly as one
    inside a command: "interrupted", exit 130."""
    dropped: list[bool] = []
    try:
        with unprinted_ctrl_c(lambda: dropped.append(True)):
            main.main(args=argv, prog_name="pack")
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit as exc:
        if dropped and exc.code in (0, None):
            click.echo("interrupted", err=True)
            sys.exit(130)
        raise


@click.group()
@click.version_option(package_name=DISTRIBUTION)
def main() -> None:
    """Pack folders of small images into WebDataset, LMDB, HDF5 or NPY, and check them.

    \b
    pack convert photos/ photos.wds --to wds
    pack info photos.wds
    pack verify photos.wds --source photos/
    """


@main.command("convert")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst")
@click.option("--to", "fmt", type=click.Choice(list(FORMATS)), required=True,
              help="Output format.")
@click.option("--shard-size", default="256MB", show_default=True,
              help="wds: roll to a new shard at this many bytes (256MB, 1GiB, ...).")
@click.option("--shard-samples", type=int, default=None,
              help="wds: also start a shard every N inputs (a shard holds the accepted "
                   "samples of N consecutive inputs); with --executor ray, the Ray tasks "
                   "then write the shards in parallel.")
@click.option("--resize", type=int, default=None, help="Scale the shorter side to N pixels.")
@click.option("--size", default=None, help="Exact output size HxW (npy default 256x256).")
@click.option("--fit", type=click.Choice(["crop", "stretch", "pad"]), default="crop",
              show_default=True, help="How --size treats the aspect ratio.")
@click.option("--encode", "codec", type=click.Choice(["jpeg", "png", "webp"]), default=None,
              help="Re-encode to this codec (default with --resize/--size: jpeg).")
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True)
@click.option("--upscale", is_flag=True, help="With --resize, also enlarge small images.")
@click.option("--check", type=click.Choice(["decode", "header", "none"]), default="decode",
              show_default=True, help="How each input is validated before packing.")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip",
              show_default=True, help="skip: list bad inputs in rejects.jsonl; fail: stop.")
@click.option("--workers", type=click.IntRange(0), default=None,
              help="Encoding threads (default: number of CPUs; 0: in-process); with "
                   "--executor ray, the cluster CPUs to use (default: all).")
@click.option("--executor", type=click.Choice(list(EXECUTORS)), default="local",
              show_default=True,
              help="Where images are encoded: local threads, or Ray tasks on a cluster "
                   f"({install_line('ray')}); the output is the same.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Ray cluster to join: auto, or HOST:PORT of the head "
                   "(default: start a local Ray instance).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted conversion; on a complete DST made from the "
                   "same source and options, do nothing and exit 0.")
@click.option("--overwrite", is_flag=True, help="Replace a complete dataset in DST.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="URL DST: an fsspec/s3fs option, repeatable (endpoint_url=http://host:9000, "
                   "anon=true, client_kwargs.region_name=eu-west-1); default: AWS_* variables.")
@click.option("--staging", type=click.Path(path_type=Path), default=None,
              help="URL DST: convert in this folder before uploading, and keep it so "
                   "--resume works (default: a temporary folder, shards dropped once sent).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def convert_command(src: Path, dst: str, fmt: str, shard_size: str, shard_samples: int | None,
                    resize: int | None, size: str | None, fit: str, codec: str | None,
                    quality: int, upscale: bool, check: str, on_error: str, workers: int | None,
                    executor: str, ray_address: str | None, resume: bool, overwrite: bool,
                    storage_options: tuple[str, ...], staging: Path | None,
                    quiet: bool) -> None:
    """Convert SRC (an image folder, a .csv/.jsonl manifest or a packed dataset) into DST.

    \b
    pack convert photos/ out.wds --to wds --shard-size 128MB
    pack convert photos/ out.lmdb --to lmdb --resize 256 --encode jpeg --quality 90
    pack convert list.csv out.h5 --to hdf5 --check header --on-error fail
    pack convert photos/ out.npy --to npy --size 224x224 --fit crop
    pack convert photos/ out.wds --to wds --resume
    pack convert out.wds out.lmdb --to lmdb
    pack convert photos/ s3://bucket/photos.wds --to wds --storage-option endpoint_url=URL
    pack convert /shared/photos /shared/out.wds --to wds --executor ray --ray-address auto
    """
    with user_errors(), ctrl_c():
        options = EncodeOptions(check=check, resize=resize, size=parse_size(size),  # type: ignore[arg-type]
                                fit=fit, codec=codec, quality=quality, upscale=upscale)  # type: ignore[arg-type]
        run = ConvertOptions(ShardOptions(parse_bytes(shard_size), shard_samples), workers,
                             on_error, resume, overwrite,  # type: ignore[arg-type]
                             executor=executor, ray_address=ray_address)  # type: ignore[arg-type]
        bar = tqdm(unit="img", disable=quiet or not sys.stderr.isatty(), desc=f"pack {fmt}")
        def on_total(total: int) -> None:
            bar.total = total

        def advance(count: int) -> None:
            bar.update(count)
            if CTRL_C.is_set():  # a Ctrl-C that the code it landed in dropped
                raise KeyboardInterrupt

        remote = is_url(dst)
        if not remote and (storage_options or staging is not None):
            raise click.BadParameter("--storage-option and --staging apply to a URL DST "
                                     "(s3://bucket/prefix, file:///path)")
        where = dst.rstrip("/") if remote else str(Path(dst))
        parsed = parse_storage_options(storage_options)
        finished = resume and holds_complete(dst, parsed)  # then convert only checks it
        try:
            if remote:
                index = convert_remote(src, dst, fmt, options, run, storage_options=parsed,
                                       staging=staging, progress=advance, on_total=on_total)
            else:
                index = convert(src, Path(dst), fmt, options, run, progress=advance,
                                on_total=on_total)
        finally:
            bar.close()
        if finished:
            click.echo(f"nothing to resume: {where} is complete ({index.num_samples} samples)")
            return
        summary = (f"packed {index.num_samples} samples into {where} "
                   f"({fmt}, {len(index.shards)} shard(s))")
        if index.num_rejected:
            rejects = f"{where}/rejects.jsonl" if remote else str(Path(dst) / "rejects.jsonl")
            summary += f"; {index.num_rejected} rejected inputs listed in {rejects}"
        click.echo(summary)
        for note in wds_notes(index):
            click.echo(f"note: {note}", err=True)



@main.command("info")
@click.argument("dst")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="URL DST: an fsspec/s3fs option, repeatable (see `pack convert --help`).")
def info_command(dst: str, as_json: bool, storage_options: tuple[str, ...]) -> None:
    """Describe a packed dataset: format, samples, classes, shards, options, rejects.

    \b
    pack info photos.wds
    pack info photos.wds --json | jq .num_samples
    pack info s3://bucket/photos.wds
    """
    with user_errors():
        if is_url(dst):
            facts = describe_remote(dst, parse_storage_options(storage_options))
        elif storage_options:
            raise click.BadParameter("--storage-option applies to a URL (s3://..., file://...)")
        else:
            facts = describe(Path(dst))
        click.echo(json.dumps(facts, indent=1, ensure_ascii=False) if as_json
                   else render(facts))


def render(facts: dict[str, Any]) -> str:
    lines = [f"{key}: {value}" for key, value in facts.items()
             if key not in ("classes", "shards")]
    lines.append("classes:")
    lines += [f"  {name}: {count}" for name, count in facts["classes"].items()]
    lines.append("shards:")
    lines += [f"  {s['name']}: {s['num_samples']} samples, {s['num_bytes']} bytes"
              for s in facts["shards"]]
    return "\n".join(lines)


@main.command("verify")
@click.argument("dst")
@click.option("--source", type=click.Path(path_type=Path), default=None,
              help="Also check every accepted source image (or sample of a packed "
                   "dataset) is present with its label.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="URL DST: an fsspec/s3fs option, repeatable (see `pack convert --help`).")
def verify_command(dst: str, source: Path | None, as_json: bool,
                   storage_options: tuple[str, ...]) -> None:
    """Re-read every shard and sample of DST and check them against the index.

    A URL is downloaded whole into a temporary folder first (shards checked against
    their sha256 as they arrive).

    \b
    pack verify photos.wds
    pack verify photos.wds --source photos/ --json
    pack verify s3://bucket/photos.wds --source photos/
    """
    with user_errors():
        if is_url(dst):
            report = verify_remote(dst, parse_storage_options(storage_options), source)
        elif storage_options:
            raise click.BadParameter("--storage-option applies to a URL (s3://..., file://...)")
        else:
            report = verify(Path(dst), source)
    if as_json:
        click.echo(json.dumps(report.__dict__, indent=1, ensure_ascii=False))
    elif report.ok:
        click.echo(f"ok: {report.num_samples} samples in {report.num_shards} shard(s); "
                   f"checked {', '.join(report.checked)}")
    else:
        click.echo(f"error: {report.problem}", err=True)
    if not report.ok:
        sys.exit(1)


# Registers `pack bench`, `pack tune` and `pack profile` on the group above.
from packer import cli_loader  # noqa: E402, F401
