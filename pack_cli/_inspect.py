"""`pack info` and `pack verify`: what a dataset holds, and whether it is intact."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from pack_cli._env import environment
from pack_cli._params import parse_storage_options
from pack_cli._terminal import user_errors
from packer.api import describe, verify
from packer.dataset.describe import encode_text, image_size_text
from packer.dataset.open import is_url
from packer.dataset.verify import Report
from packer.source.no_images import not_a_dataset


@click.command("info")
@click.argument("dst", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="URL DST: an fsspec/s3fs option, repeatable (see `pack convert --help`).")
@click.option("--env", "show_env", is_flag=True,
              help="The versions in use and which cropped JPEG decode runs, and why.")
def info_command(dst: str | None, as_json: bool, storage_options: tuple[str, ...],
                 show_env: bool) -> None:
    """Describe a packed dataset: format, samples, classes, shards, options, rejects.

    \b
    pack info photos.wds
    pack info photos.wds --json | jq .num_samples
    pack info s3://bucket/photos.wds
    pack info --env
    """
    with user_errors():
        if show_env:
            if dst is not None:
                raise click.UsageError("give a dataset (pack info DST) or --env, not both")
            facts = environment()
            click.echo(json.dumps(facts, indent=1) if as_json
                       else "\n".join(f"{key}: {value}" for key, value in facts.items()))
            return
        if dst is None:
            raise click.UsageError("missing DST: pack info DST, or pack info --env for the "
                                   "environment")
        parsed = url_storage_options(dst, storage_options)
        image_folder = None if is_url(dst) else not_a_dataset(Path(dst))
        if image_folder is not None:
            raise image_folder
        description = describe(dst, storage_options=parsed)
        click.echo(json.dumps(description, indent=1, ensure_ascii=False) if as_json
                   else render(description))


def render(facts: Mapping[str, Any]) -> str:
    words = {"image_size": image_size_text(facts), "encode": encode_text(facts["encode"])}
    lines = [f"{key}: {words.get(key, value)}" for key, value in facts.items()
             if key not in ("classes", "shards", "fields", "categories")]
    if "fields" in facts:
        lines.append("fields:")
        lines += [f"  {name}: {field['type']}, {field['num_present']} of "
                  f"{facts['num_samples']} samples have a value"
                  for name, field in facts["fields"].items()]
    if "categories" in facts:
        lines.append("categories:")
        lines += [f"  {cid}: {name}" for cid, name in facts["categories"].items()]
    lines.append("classes:")
    lines += [f"  {name}: {count}" for name, count in facts["classes"].items()]
    lines.append("shards:")
    lines += [f"  {s['name']}: {s['num_samples']} samples, {s['num_bytes']} bytes"
              for s in facts["shards"]]
    return "\n".join(lines)


@click.command("verify")
@click.argument("dst")
@click.option("--source", type=click.Path(path_type=Path), default=None,
              help="Also check every accepted source image (archive member, or sample "
                   "of a packed dataset) is present with its label.")
@click.option("--annotations", type=click.Path(path_type=Path), default=None,
              help="With --source: the COCO JSON DST was converted with; its boxes, "
                   "categories, ... are compared too.")
@click.option("--repair", is_flag=True,
              help="Rewrite the damaged files from --source (re-encoded as converted), "
                   "then verify again.")
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output, every damaged sample listed.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="URL DST: an fsspec/s3fs option, repeatable (see `pack convert --help`).")
def verify_command(dst: str, source: Path | None, annotations: Path | None, repair: bool,
                   as_json: bool, storage_options: tuple[str, ...]) -> None:
    """Re-read every shard and sample of DST and check them against the index.

    Damage is listed per sample: one summary line, then a line per damaged sample
    (index, key, file, offset, what failed; --json lists them all). A URL is downloaded
    whole into a temporary folder first (shards checked against their sha256 as they
    arrive).

    \b
    pack verify photos.wds
    pack verify photos.wds --source photos/ --json
    pack verify coco.wds --source train2017/ --annotations instances_train2017.json
    pack verify s3://bucket/photos.wds --source photos/
    pack verify photos.wds --repair --source photos/
    """
    with user_errors():
        if annotations is not None and source is None:
            raise click.BadParameter("--annotations needs --source (the image folder)")
        report = verify(dst, source, annotations, repair=repair,
                        storage_options=url_storage_options(dst, storage_options))
    if as_json:
        click.echo(json.dumps(report.__dict__, indent=1, ensure_ascii=False))
    elif report.ok:
        if report.repaired:
            click.echo(f"repaired: {', '.join(report.repaired)}")
        click.echo(f"ok: {report.num_samples} samples {held_in(report)}; "
                   f"checked {', '.join(report.checked)}")
    else:
        click.echo(f"error: {report.problem}", err=True)
        click.echo("\n".join(damage_lines(report)) or None)
    if not report.ok:
        sys.exit(1)


MAX_DAMAGE_LINES = 20


def url_storage_options(dst: str, pairs: tuple[str, ...]) -> dict[str, Any]:
    """--storage-option, refused unless DST is a URL."""
    if pairs and not is_url(dst):
        raise click.BadParameter("--storage-option applies to a URL (s3://..., file://...)")
    return parse_storage_options(pairs)


def damage_lines(report: Report) -> list[str]:
    """A line per damaged sample, at most MAX_DAMAGE_LINES (then how many more)."""
    lines = [f"  sample {d['index']} {d['key']!r}: {d['file']}"
             f"{f' at byte {offset}' if (offset := d['offset']) >= 0 else ''}: {d['reason']}"
             for d in report.damaged[:MAX_DAMAGE_LINES]]
    more = len(report.damaged) - MAX_DAMAGE_LINES
    if more > 0:
        lines.append(f"  ... and {more} more (--json lists them all)")
    return lines


def held_in(report: Report) -> str:
    """`in 3 shards` for the sharded format; `(lmdb)` for a one-file format."""
    if report.format not in ("wds", ""):
        return f"({report.format})"
    return f"in {report.num_shards} shard{'s' * (report.num_shards != 1)}"
