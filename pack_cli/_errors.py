"""How `pack` ends: library errors as one line and an exit code, Ctrl-C as "interrupted".

A PackError becomes one line on stderr and exit code 1; bad options exit 2 (click);
Ctrl-C exits 130 with a hint to resume.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from packer.errors import PackError, interrupted

RESUME_HINT = "interrupted: rerun the same command with --resume to continue"
_CONVERTING: list[bool] = []  # a conversion began and has not returned


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


