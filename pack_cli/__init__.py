"""The `pack` console script, above both libraries: thin click commands over packer and
the diagnostics of `readers` (`pack bench/tune/profile` import torch inside the command).

    pack convert SRC DST --to wds|lmdb|hdf5|npy     pack_cli._convert
    pack append SRC DST                             pack_cli._append
    pack info DST | pack verify DST [--source SRC]  pack_cli._inspect
    pack bench | tune | profile                     pack_cli._loader
    pack stats DST                                  pack_cli._stats
    pack split DST --val F [--test F] [--stratify]  pack_cli._split
    pack dedup DST                                  pack_cli._dedup
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import sys

import click

from pack_cli._append import append_command
from pack_cli._convert import convert_command
from pack_cli._dedup import dedup_command
from pack_cli._inspect import info_command, verify_command
from pack_cli._loader import bench_command, profile_command, tune_command
from pack_cli._split import split_command
from pack_cli._stats import stats_command
from pack_cli._terminal import (
    RESUME_HINT,
    conversion_interrupted,
    forget_conversions,
    user_errors,
)
from packer.errors import DISTRIBUTION, unprinted_ctrl_c

__all__ = ["main", "run", "user_errors"]


def run(argv: list[str] | None = None) -> None:
    """The `pack` console script: `main`, with a Ctrl-C that lands in click's own start-up,
    before any command runs, or in a weakref callback once a conversion has returned
    (where Python would print it and go on), ending as quietly as one inside a command:
    "interrupted", exit 130."""
    dropped: list[bool] = []
    try:
        forget_conversions()  # a conversion's mark counts in the process that made it only
        with unprinted_ctrl_c(lambda: dropped.append(True)):
            main.main(args=argv, prog_name="pack")
    except KeyboardInterrupt:  # a `--resume` rerun stopped in start-up keeps its state
        resumable = conversion_interrupted() or "--resume" in (sys.argv if argv is None
                                                                else argv)
        click.echo(RESUME_HINT if resumable else "interrupted", err=True)
        sys.exit(130)
    except SystemExit as exc:
        if dropped and exc.code in (0, None):
            click.echo("interrupted", err=True)
            sys.exit(130)
        raise
    finally:
        atexit.register(_ignore_ctrl_c)  # runs before the exit callbacks registered earlier


def _ignore_ctrl_c() -> None:
    """At the interpreter's exit, once the command's exit status is decided, a Ctrl-C has
    nothing left to stop: ignore it, so that one landing in torch's exit callbacks prints
    no "Exception ignored ... KeyboardInterrupt" traceback. (At exit, not when `run`
    returns: a process that calls `run` and goes on keeps its Ctrl-C, and so do the
    children it starts, which inherit an ignored signal.)"""
    with contextlib.suppress(ValueError):  # not the main thread: no signals there anyway
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@click.group()
@click.version_option(package_name=DISTRIBUTION)
def main() -> None:
    """Pack folders of small images into WebDataset, LMDB, HDF5 or NPY, and check them.

    \b
    pack convert photos/ photos.wds --to wds
    pack info photos.wds
    pack verify photos.wds --source photos/
    """


for command in (convert_command, info_command, verify_command, bench_command, tune_command,
                profile_command, append_command, stats_command, split_command,
                dedup_command):
    main.add_command(command)
