"""What a command shows on the terminal: its progress bar, which must not lose a Ctrl-C,
what a --resume reused, and how the command ends.

A PackError becomes one line on stderr and exit code 1; bad options exit 2 (click);
Ctrl-C exits 130 with a hint to resume.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from tqdm import tqdm

from packer.errors import PackError, ctrl_c_pressed, interrupted

RESUME_HINT = "interrupted: rerun the same command with --resume to continue"
_CONVERTING: list[bool] = []  # a conversion began and has not returned
Count = Callable[[int], None]


@contextmanager
def converting() -> Iterator[None]:
    """Mark a conversion under way until it returns. A second Ctrl-C that lands while
    the first one winds down (after `ctrl_c_watched` restored Python's handler, before
    `user_errors` printed the hint) escapes both; `run` then still gives the --resume
    hint, since the conversion's state is left for a resume."""
    _CONVERTING[:] = [True]
    yield
    _CONVERTING.clear()


def forget_conversions() -> None:
    _CONVERTING.clear()


def conversion_interrupted() -> bool:
    """Whether a conversion began and did not return (see `converting`)."""
    return bool(_CONVERTING)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn library errors into one line and an exit code, never a traceback."""
    try:
        yield
    except (KeyboardInterrupt, Exception) as exc:
        if interrupted(exc):  # also a Ctrl-C that a library wrapped in its own error (h5py)
            click.echo(RESUME_HINT, err=True)
            sys.exit(130)
        if isinstance(exc, click.BadParameter):
            click.echo(f"error: {exc.message}", err=True)
            sys.exit(2)
        if isinstance(exc, (PackError, ValueError)):
            click.echo(f"error: {exc}", err=True)
            sys.exit(1 if isinstance(exc, PackError) else 2)
        raise


@contextmanager
def progress_bar(desc: str, quiet: bool) -> Iterator[tuple[Count, Count]]:
    """(advance, on_total) for the library's `progress` and `on_total` callbacks, drawing
    a bar on a terminal (none when `quiet` or stderr is not one), closed when the block
    ends. `advance` raises KeyboardInterrupt for a Ctrl-C that the code it landed in
    dropped (`ctrl_c_watched` noted it)."""
    bar = tqdm(unit="img", disable=quiet or not sys.stderr.isatty(), desc=desc)

    def on_total(total: int) -> None:
        bar.total = total

    def advance(count: int) -> None:
        bar.update(count)
        if ctrl_c_pressed():
            raise KeyboardInterrupt

    try:
        yield advance, on_total
    finally:
        bar.close()


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
