"""How `pack` ends: library errors as one line and an exit code, Ctrl-C as "interrupted".

A PackError becomes one line on stderr and exit code 1; bad options exit 2 (click);
Ctrl-C exits 130 with a hint to resume.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from packer.errors import CTRL_C, PackError, interrupted

RESUME_HINT = "interrupted: rerun the same command with --resume to continue"
_CONVERTING: list[bool] = []  # a conversion began and has not returned


@contextmanager
def converting() -> Iterator[None]:
    """Mark a conversion under way until it returns. A second Ctrl-C that lands while
    the first one winds down (after ctrl_c restored Python's handler, before user_errors
    printed the hint) escapes both; `pack_cli.run` then still gives the --resume hint.
    (tests/test_faults_kill.py caught it under load: "interrupted" alone, state left.)"""
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
