"""What `pack convert` works out before converting: the format from DST's suffix, the
options that do not apply refused, and the summary line (time and size written).

An option that does nothing with the others given would be silently ignored, so it is
refused with one line naming the option that makes it apply.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from click.core import ParameterSource

from packer.core.index import Index

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


def summary(fmt: str, where: str, index: Index, seconds: float) -> str:
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


class Reused:
    """Wraps the progress callbacks to learn what a --resume reused: a conversion reports
    its number of inputs (`on_total`), then, as its first count, the inputs an interrupted
    run already packed (`convert_local` reports them)."""

    def __init__(self, advance: Callable[[int], None],
                 on_total: Callable[[int], None]) -> None:
        self._advance = advance
        self._on_total = on_total
        self.total: int | None = None
        self.done: int | None = None  # the first count after the total

    def on_total(self, total: int) -> None:
        self.total = total
        self._on_total(total)

    def advance(self, count: int) -> None:
        if self.done is None and self.total is not None:
            self.done = count
        self._advance(count)

    def line(self) -> str:
        """`resumed: 300 of 500 inputs were already packed`, or that nothing was."""
        if not self.done:
            return "resumed: no inputs of an interrupted run were kept; packed them all"
        return f"resumed: {self.done} of {self.total} inputs were already packed"
