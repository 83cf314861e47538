"""`pack append SRC DST`: grow a packed dataset with the new inputs of a source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pack_cli._errors import converting, user_errors
from pack_cli._params import parse_size
from pack_cli._progress import progress_bar
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
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip",
              show_default=True, help="skip: list bad inputs in rejects.jsonl; fail: stop.")
@click.option("--workers", type=click.IntRange(0), default=None,
              help="Encoding threads (default: number of CPUs; 0: in-process).")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted append of DST (or finish its commit).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def append_command(src: Path, dst: Path, resize: int | None, size: str | None,
                   fit: str | None, codec: str | None, quality: int | None,
                   check: str | None, existing: str, on_error: str, workers: int | None,
                   resume: bool, quiet: bool) -> None:
    """Add the inputs of SRC that DST does not hold yet (by key), after its samples.

    New samples are stored with DST's own options and follow the old ones in key
    order; old samples keep their index, bytes and digest. New class names get the
    next labels. DST stays the old complete dataset until the new index.json lands;
    an interrupted append continues with --resume. Appending again is a no-op.

    \b
    pack append photos/ photos.wds
    pack append photos/ photos.npy --size 224x224 --resume
    """
    with converting(), user_errors(), ctrl_c_watched():
        encode: dict[str, Any] = {"resize": resize, "size": parse_size(size), "fit": fit,
                                  "codec": codec, "quality": quality, "check": check}
        with progress_bar("pack append", quiet) as (advance, on_total):
            result = append(src, dst, encode, workers=workers,
                            on_error=on_error,  # type: ignore[arg-type]
                            resume=resume, existing=existing,  # type: ignore[arg-type]
                            progress=advance, on_total=on_total)
        line = f"appended {result.summary} to {dst}"
        if result.num_new_rejects:
            line += (f"; {result.num_new_rejects} rejected inputs listed in "
                     f"{dst / 'rejects.jsonl'}")
        click.echo(line)
