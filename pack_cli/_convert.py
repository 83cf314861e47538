"""`pack convert`: options in, one library call, a summary out.

Before converting it works out the format from DST's suffix and refuses an option that
does nothing with the others given (it would be silently ignored), in one line naming
the option that makes it apply.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from click.core import ParameterSource

from pack_cli._params import parse_bytes, parse_fields, parse_size, parse_storage_options
from pack_cli._terminal import Reused, converting, progress_bar, user_errors
from packer.api import convert, holds_complete
from packer.conversion.executors import EXECUTORS
from packer.conversion.job import ConvertOptions
from packer.core.index import Index
from packer.dataset.describe import wds_notes
from packer.dataset.open import is_url
from packer.encode import EncodeOptions
from packer.errors import ctrl_c_watched, install_line
from packer.formats import FORMATS
from packer.formats.base import MIN_SHARDS, ShardOptions


@click.command("convert")
@click.argument("src")
@click.argument("dst")
@click.option("--to", "fmt", type=click.Choice(list(FORMATS)), default=None,
              help="Output format (default: from DST's suffix: .wds, .lmdb, .h5/.hdf5, "
                   ".npy).")
@click.option("--shard-size", default=None,
              help="wds: roll to a new shard at this many bytes (256MB, 1GiB, ...). Default: "
                   f"256MB, and at least {MIN_SHARDS} shards (a shard also ends every N/"
                   f"{MIN_SHARDS} of N inputs) so that a small set still gives each loader "
                   "worker a shard; either option given, that limit alone.")
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
@click.option("--field", "field_types", multiple=True, metavar="NAME:TYPE",
              help="The type of a manifest column or key, or of a packed source's field, kept "
                   "as a per-sample field: str "
                   "(CSV default), int, float, json (the cell is JSON text), bytes (the cell "
                   "names a file), floats or ints (a list of numbers stored as a float32 / "
                   "int64 array: boxes, ids); repeatable.")
@click.option("--fields", "keep_fields", default=None, metavar="A,B",
              help="Keep only these per-sample fields (manifest columns or keys, sidecars "
                   "txt/json, a packed source's fields); default: all.")
@click.option("--no-fields", is_flag=True, help="Keep no per-sample fields, only image + label.")
@click.option("--annotations", type=click.Path(path_type=Path), default=None,
              help="A COCO-style JSON (instances_train.json): SRC is its image folder; each "
                   "image's boxes, category_ids, annotation_ids, iscrowd and segmentation "
                   "become fields, the categories go in the index.")
@click.option("--label", "label", default=None, metavar="cls|json:KEY|none",
              help="webdataset shards: the label from each sample's .cls member (the default "
                   "where the shards have one), from KEY of its .json, or none (one class); "
                   "Parquet: the label column (the default) or none; an image folder: none "
                   "packs every image below it, top level included, as one class "
                   "(unlabelled).")
@click.option("--drop-duplicates", is_flag=True,
              help="Keep the first (by key) of samples whose stored bytes are equal; list "
                   "the others in rejects.jsonl, naming the key kept.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def convert_command(src: str, dst: str, fmt: str | None, shard_size: str | None,
                    shard_samples: int | None, resize: int | None, size: str | None,
                    fit: str, codec: str | None, quality: int, upscale: bool, check: str,
                    on_error: str, workers: int | None,
                    executor: str, ray_address: str | None, resume: bool, overwrite: bool,
                    storage_options: tuple[str, ...], staging: Path | None,
                    field_types: tuple[str, ...], keep_fields: str | None, no_fields: bool,
                    annotations: Path | None, label: str | None, drop_duplicates: bool,
                    quiet: bool) -> None:
    """Convert SRC (an image folder, a .csv/.jsonl manifest, a COCO .json, a .tar/.zip
    archive, webdataset shards, Parquet with image bytes or a packed dataset) into DST.

    \b
    pack convert photos/ out.wds --shard-size 128MB
    pack convert flat-images/ out.wds --label none
    pack convert train.tar out.wds --to wds
    pack convert 'shards/train-{000000..000099}.tar' out.lmdb --to lmdb
    pack convert 's3://bucket/train-{000000..000099}.tar' out.lmdb --to lmdb
    pack convert img2dataset-out/ out.lmdb --to lmdb --label none
    pack convert hub-dataset/data/ out.wds --to wds
    pack convert photos/ out.lmdb --to lmdb --resize 256 --encode jpeg --quality 90
    pack convert list.csv out.h5 --to hdf5 --check header --on-error fail
    pack convert photos/ out.npy --to npy --size 224x224 --fit crop
    pack convert photos/ out.wds --to wds --resume
    pack convert out.wds out.lmdb --to lmdb
    pack convert captions.csv out.wds --to wds --field score:float --fields caption,score
    pack convert train2017/ out.wds --to wds --annotations instances_train2017.json
    pack convert train/_annotations.coco.json out.wds --to wds
    pack convert photos/ s3://bucket/photos.wds --to wds --storage-option endpoint_url=URL
    pack convert /shared/photos /shared/out.wds --to wds --executor ray --ray-address auto
    """
    with converting(), user_errors(), ctrl_c_watched():
        fmt = format_of(dst, fmt)
        refuse_unused(fmt, resize, size, codec, upscale)
        options = EncodeOptions(check=check, resize=resize, size=parse_size(size),  # type: ignore[arg-type]
                                fit=fit, codec=codec, quality=quality, upscale=upscale)  # type: ignore[arg-type]
        run = ConvertOptions(shard_options(shard_size, shard_samples), workers,
                             on_error, resume, overwrite,  # type: ignore[arg-type]
                             executor=executor, ray_address=ray_address,  # type: ignore[arg-type]
                             fields=parse_fields(field_types, keep_fields, no_fields,
                                                 annotations, label),
                             drop_duplicates=drop_duplicates)
        remote = is_url(dst)
        if (staging is not None and not remote) or \
                (storage_options and not remote and not is_url(src)):
            raise click.BadParameter("--storage-option and --staging apply to a URL DST "
                                     "(s3://bucket/prefix, file:///path); --storage-option "
                                     "also to a URL SRC of webdataset shards")
        where = dst.rstrip("/") if remote else str(Path(dst))
        parsed = parse_storage_options(storage_options)
        finished = resume and holds_complete(dst, parsed)  # then convert only checks it
        started = time.monotonic()
        with progress_bar(f"pack {fmt}", quiet) as (advance, on_total):
            reused = Reused(advance, on_total)
            index = convert(src, dst, fmt, options, run, storage_options=parsed,
                            staging=staging, progress=reused.advance,
                            on_total=reused.on_total)
        if finished:
            click.echo(f"nothing to resume: {where} is complete ({index.num_samples} samples)")
            return
        if resume:
            click.echo(reused.line())
        summary = packed_line(fmt, where, index, time.monotonic() - started)
        if index.num_rejected:
            rejects = f"{where}/rejects.jsonl" if remote else str(Path(dst) / "rejects.jsonl")
            summary += f"; {index.num_rejected} rejected inputs listed in {rejects}"
        click.echo(summary)
        for note in wds_notes(index) if index.format == "wds" else ():
            click.echo(f"note: {note}", err=True)


def shard_options(size: str | None, samples: int | None) -> ShardOptions:
    """The given limits (256MB unless --shard-size says), or with neither option the
    default spread over at least MIN_SHARDS shards."""
    if size is None and samples is None:
        return ShardOptions.spread()
    return ShardOptions(parse_bytes(size or "256MB"), samples)


SUFFIX_FORMATS = {".wds": "wds", ".lmdb": "lmdb", ".h5": "hdf5", ".hdf5": "hdf5",
                  ".npy": "npy"}


def format_of(dst: str, fmt: str | None) -> str:
    """--to, else the format DST's suffix names; one line listing the suffixes if none."""
    if fmt is not None:
        return fmt
    name = dst.rstrip("/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    inferred = SUFFIX_FORMATS.get(name[dot:].lower()) if dot > 0 else None
    if inferred is None:
        known = ", ".join(f"{suffix} ({name})" for suffix, name in SUFFIX_FORMATS.items())
        raise click.BadParameter(f"{dst}: cannot tell the format from the name; pass --to "
                               f"wds|lmdb|hdf5|npy or end DST with one of {known}")
    return inferred


def given(name: str) -> bool:
    """Whether the option was written on the command line (or in the environment)."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def refuse_unused(fmt: str, resize: int | None, size: str | None, codec: str | None,
                  upscale: bool) -> None:
    """One line for the first option given that the others make do nothing."""
    if fmt != "wds":
        for name, option in (("shard_size", "--shard-size"),
                             ("shard_samples", "--shard-samples")):
            if given(name):
                raise click.BadParameter(f"{option} applies to --to wds (shards); {fmt} is "
                                       f"one file: drop {option}")
    if given("fit") and size is None and fmt != "npy":
        raise click.BadParameter("--fit applies with --size HxW (npy: its default 256x256); "
                               "add --size or drop --fit")
    if upscale and resize is None:
        raise click.BadParameter("--upscale applies with --resize N; add --resize or drop "
                               "--upscale")
    if given("quality") and (fmt == "npy" or (resize is None and size is None
                                               and codec is None)):
        raise click.BadParameter("--quality applies when images are re-encoded (--encode, "
                               "--resize or --size, not npy's raw pixels); add one or drop "
                               "--quality")


def packed_line(fmt: str, where: str, index: Index, seconds: float) -> str:
    """`packed 500 samples into photos.wds (wds, 8 shards, 12.3 MB) in 1.4 s`."""
    stored = fmt
    if fmt == "wds":
        count = len(index.shards)
        stored = f"wds, {count} shard{'s' * (count != 1)}"
    written = sum(shard.num_bytes for shard in index.shards)
    return (f"packed {index.num_samples} samples into {where} ({stored}, "
            f"{megabytes(written)}) in {seconds:.1f} s")


def megabytes(count: int) -> str:
    """`12.3 MB`, `4.1 kB`, `1.2 GB` (decimal units, as --shard-size reads them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
