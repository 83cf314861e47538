"""`pack append SRC DST`: grow a packed dataset with the new inputs of a source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pack_cli._params import parse_fields, parse_size
from pack_cli._terminal import converting, progress_bar, user_errors
from packer.api import append
from packer.errors import ctrl_c_watched


@click.command("append")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--resize", type=int, default=None,
              help="Expected --resize of DST; refused if DST stores another (new samples "
                   "always take DST's own encode options).")
@click.option("--size", default=None, help="Expected --size HxW of DST (npy: the row shape).")
@click.option("--fit", type=click.Choice(["crop", "stretch", "pad"]), default=None,
              help="Expected --fit of DST.")
@click.option("--encode", "codec", type=click.Choice(["jpeg", "png", "webp"]), default=None,
              help="Expected --encode of DST.")
@click.option("--quality", type=click.IntRange(1, 100), default=None,
              help="Expected --quality of DST.")
@click.option("--check", type=click.Choice(["decode", "header", "none"]), default=None,
              help="Expected --check of DST.")
@click.option("--check-existing", "existing", type=click.Choice(["size", "digest"]),
              default="size", show_default=True,
              help="How an input whose key DST holds is compared with the stored file "
                   "(DST storing original files): its size, or its bytes read and hashed.")
@click.option("--replace", is_flag=True,
              help="An input whose key DST holds with other bytes, class or field values "
                   "replaces that sample at its index (without it: a reject naming both). "
                   "Other samples keep their indices and bytes; a reader's state saved "
                   "before stays valid, but the replaced indices now hold the new samples. "
                   "wds writes the shards holding them again, npy copies images.npy.")
@click.option("--drop-duplicates", is_flag=True,
              help="A new input whose stored bytes DST (or an earlier new input) holds "
                   "already is listed in rejects.jsonl, not packed: DST's sample is kept.")
@click.option("--field", "field_types", multiple=True, metavar="NAME:TYPE",
              help="The type of a manifest column or a packed source's field, as in "
                   "pack convert; each field must have DST's type; repeatable.")
@click.option("--fields", "keep_fields", default=None, metavar="A,B",
              help="Take only these of SRC's per-sample fields (default: all; each must be "
                   "one of DST's; a DST field SRC lacks is no value for the new samples).")
@click.option("--no-fields", is_flag=True,
              help="Take none of SRC's fields: the new samples have no value for DST's.")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip",
              show_default=True, help="skip: list bad inputs in rejects.jsonl; fail: stop.")
@click.option("--workers", type=click.IntRange(0), default=None,
              help="Encoding threads (default: number of CPUs; 0: in-process).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted append of DST (or finish its commit).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def append_command(src: Path, dst: Path, resize: int | None, size: str | None,
                   fit: str | None, codec: str | None, quality: int | None,
                   check: str | None, existing: str, replace: bool, drop_duplicates: bool,
                   field_types: tuple[str, ...], keep_fields: str | None, no_fields: bool,
                   on_error: str, workers: int | None, resume: bool, quiet: bool) -> None:
    """Add the inputs of SRC that DST does not hold yet (by key), after its samples.

    New samples are stored with DST's own options and per-sample fields and
    follow the old ones in key order; old samples keep their index, bytes and
    digest. New class names get the next labels. DST stays the old complete
    dataset until the new index.json lands; an interrupted append continues with
    --resume. Appending again is a no-op.

    \b
    pack append photos/ photos.wds
    pack append photos/ photos.npy --size 224x224 --resume
    pack append captions.csv captions.lmdb --field score:float --replace
    """
    with converting(), user_errors(), ctrl_c_watched():
        encode: dict[str, Any] = {"resize": resize, "size": parse_size(size), "fit": fit,
                                  "codec": codec, "quality": quality, "check": check}
        fields = parse_fields(field_types, keep_fields, no_fields)
        with progress_bar("pack append", quiet) as (advance, on_total):
            result = append(src, dst, encode, workers=workers,
                            on_error=on_error,  # type: ignore[arg-type]
                            resume=resume, existing=existing,  # type: ignore[arg-type]
                            fields=fields, replace=replace, drop_duplicates=drop_duplicates,
                            progress=advance, on_total=on_total)
        line = f"appended {result.summary} to {dst}"
        if result.num_new_rejects:
            line += (f"; {result.num_new_rejects} rejected inputs listed in "
                     f"{dst / 'rejects.jsonl'}")
        click.echo(line)
        if result.splits_stale:
            click.echo(f"{dst} has splits made before: rerun `pack split {dst}` with the same "
                       "settings to place the new samples (no sample already split moves)")
        if result.replaced:
            click.echo("the replaced samples keep their indices with new bytes: a reader "
                       "state saved before the append reads the new samples there")
