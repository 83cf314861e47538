"""`pack`: the command line. Thin: parse, call the library, print, map errors to exit codes.

A PackError becomes one line on stderr and exit code 1; bad options exit 2 (click);
Ctrl-C exits 130 with a hint to resume.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, TypeVar

import click
from tqdm import tqdm

from packer.cli_info import describe
from packer.convert import ConvertOptions, convert
from packer.encode import EncodeOptions
from packer.errors import PackError
from packer.formats import FORMATS
from packer.formats.base import ShardOptions
from packer.verify import verify

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
    except PackError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except click.BadParameter as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted: rerun the same command with --resume to continue", err=True)
        sys.exit(130)


@click.group()
@click.version_option(package_name="packer")
def main() -> None:
    """Pack folders of small images into WebDataset, LMDB, HDF5 or NPY, and check them.

    \b
    pack convert photos/ photos.wds --to wds
    pack info photos.wds
    pack verify photos.wds --source photos/
    """


@main.command("convert")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--to", "fmt", type=click.Choice(list(FORMATS)), required=True,
              help="Output format.")
@click.option("--shard-size", default="256MB", show_default=True,
              help="wds: roll to a new shard at this many bytes (256MB, 1GiB, ...).")
@click.option("--shard-samples", type=int, default=None,
              help="wds: also roll at this many samples.")
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
              help="Encoding processes (default: number of CPUs; 0: in-process).")
@click.option("--resume", is_flag=True, help="Continue an interrupted conversion.")
@click.option("--overwrite", is_flag=True, help="Replace a complete dataset in DST.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def convert_command(src: Path, dst: Path, fmt: str, shard_size: str, shard_samples: int | None,
                    resize: int | None, size: str | None, fit: str, codec: str | None,
                    quality: int, upscale: bool, check: str, on_error: str, workers: int | None,
                    resume: bool, overwrite: bool, quiet: bool) -> None:
    """Convert SRC (an image folder or a .csv/.jsonl manifest) into DST.

    \b
    pack convert photos/ out.wds --to wds --shard-size 128MB
    pack convert photos/ out.lmdb --to lmdb --resize 256 --encode jpeg --quality 90
    pack convert list.csv out.h5 --to hdf5 --check header --on-error fail
    pack convert photos/ out.npy --to npy --size 224x224 --fit crop
    pack convert photos/ out.wds --to wds --resume
    """
    with user_errors():
        options = EncodeOptions(check=check, resize=resize, size=parse_size(size),  # type: ignore[arg-type]
                                fit=fit, codec=codec, quality=quality, upscale=upscale)  # type: ignore[arg-type]
        run = ConvertOptions(ShardOptions(parse_bytes(shard_size), shard_samples), workers,
                             on_error, resume, overwrite)  # type: ignore[arg-type]
        bar = tqdm(unit="img", disable=quiet or not sys.stderr.isatty(), desc=f"pack {fmt}")
        def on_total(total: int) -> None:
            bar.total = total

        def advance(count: int) -> None:
            bar.update(count)

        try:
            index = convert(src, dst, fmt, options, run, progress=advance, on_total=on_total)
        finally:
            bar.close()
        summary = (f"packed {index.num_samples} samples into {dst} "
                   f"({fmt}, {len(index.shards)} shard(s))")
        if index.num_rejected:
            summary += f"; {index.num_rejected} rejected inputs listed in {dst / 'rejects.jsonl'}"
        click.echo(summary)


@main.command("info")
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def info_command(dst: Path, as_json: bool) -> None:
    """Describe a packed dataset: format, samples, classes, shards, options, rejects.

    \b
    pack info photos.wds
    pack info photos.wds --json | jq .num_samples
    """
    with user_errors():
        facts = describe(dst)
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
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--source", type=click.Path(path_type=Path), default=None,
              help="Also check every accepted source image is present with its label.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify_command(dst: Path, source: Path | None, as_json: bool) -> None:
    """Re-read every shard and sample of DST and check them against the index.

    \b
    pack verify photos.wds
    pack verify photos.wds --source photos/ --json
    """
    with user_errors():
        report = verify(dst, source)
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
