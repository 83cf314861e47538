"""Decide what to do with DST before a conversion (create, refuse, overwrite, resume),
and word a failed write into it (disk full, permissions) as one line with the fix.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from packer import formats
from packer.core.layout import DATASET_FILES, FORMAT_NAMES, INDEX_NAME, STATE_DIR, WORK_DIRS
from packer.errors import (
    DatasetExistsError,
    DestinationError,
    DiskFullError,
    PackError,
    SourceError,
    interrupted,
)
from packer.formats._wds_names import is_ours as is_wds_file
from packer.storage.files import PARTIAL_SUFFIX

# An I/O error with less free space than this on DST's disk is taken for a full disk:
# LMDB reports a short write on a full disk as EIO, h5py often without an errno.
LOW_SPACE_BYTES = 64 << 20



@functools.cache
def _our_names(with_state: bool) -> frozenset[str]:
    """Every dataset file name (`DATASET_FILES`), each format's own files as it declares them
    (wds' are patterns: `is_wds_file`), and the working state of an unfinished conversion
    or append when asked (`WORK_DIRS`)."""
    names = set(DATASET_FILES) | (set(WORK_DIRS) if with_state else set())
    for fmt in FORMAT_NAMES:  # without importing each format (`formats.FILES`)
        names |= {f for f in formats.FILES[fmt] if "*" not in f}
    return frozenset(names)


def is_ours(name: str, *, with_state: bool = True) -> bool:
    """Whether a name at the top of a DST (a folder, or a URL prefix: `a/b` counts as `a`)
    is one a conversion writes, so --overwrite may remove it and --resume keep it: a folder
    renamed since its conversion still holds only our files."""
    top = name.split("/", 1)[0]
    return top in _our_names(with_state) or is_wds_file(top) or top.endswith(PARTIAL_SUFFIX)


def refuse_inside_source(src: Path, folder: Path) -> None:
    """Refuse a DST inside an image-folder SRC: writing it would change the source.

    (A manifest's folder is fine: only the files the manifest lists are the source.)
    """
    if not src.is_dir():
        return
    root, dst = src.resolve(), folder.resolve()
    if dst == root or root in dst.parents:
        raise SourceError(
            f"{folder}: inside the source folder {src}, which is never modified (and the "
            "dataset would become a class of its own source); choose a DST outside it"
        )


def prepare(folder: Path, resume: bool, overwrite: bool) -> bool:
    """Make `folder` ready, refusing to clobber a dataset or somebody else's files.

    Returns True when `folder` holds a complete dataset and `resume` was asked (a retry
    of a finished run, or of one killed after index.json while removing its resume
    state): the caller checks it is the same job instead of converting again.
    """
    if folder.exists() and not folder.is_dir():
        raise DatasetExistsError(f"{folder}: exists and is not a folder; choose another DST")
    folder.mkdir(parents=True, exist_ok=True)
    complete = (folder / INDEX_NAME).exists()
    unfinished = (folder / STATE_DIR).exists()
    if overwrite:
        refuse_foreign(folder)  # before anything is removed: a refusal removes nothing
        clear(folder)
        return False
    if complete and resume:
        return True
    if complete:
        raise DatasetExistsError(
            f"{folder}: already holds a complete dataset; pass --overwrite to replace it"
        )
    if unfinished and not resume:
        raise DatasetExistsError(
            f"{folder}: holds an unfinished conversion; pass --resume to continue it or "
            "--overwrite to start over"
        )
    refuse_foreign(folder)
    return False


def refuse_foreign(folder: Path) -> None:
    """Refuse a folder that holds a file no conversion writes: it is somebody else's."""
    foreign = sorted(p.name for p in folder.iterdir() if not is_ours(p.name))
    if foreign:
        raise DatasetExistsError(
            f"{folder}: not empty (found {foreign[0]!r}); choose an empty or new DST folder"
        )


def clear(folder: Path) -> None:
    """Remove what an earlier conversion left (index first, so nothing looks complete)."""
    (folder / INDEX_NAME).unlink(missing_ok=True)
    for path in sorted(folder.iterdir()):
        if not is_ours(path.name):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@contextlib.contextmanager
def write_errors(folder: Path) -> Iterator[None]:
    """Word a failed write into `folder` as a DestinationError: what happened and the fix.

    Our own errors pass through. What was made durable before the failure stays, so the
    fix is always: remove the cause, then rerun with --resume.
    """
    try:
        yield
    except PackError:
        raise
    except OSError as exc:
        if interrupted(exc):  # Ctrl-C, then a clean-up that failed because of it
            raise KeyboardInterrupt from exc
        reason = disk_full(exc, folder)
        if reason is not None:
            raise DiskFullError(
                f"{folder}: disk full ({reason}) while writing the dataset; free space on "
                "that disk, then rerun the same command with --resume"
            ) from exc
        raise DestinationError(
            f"{folder}: cannot write ({exc}); fix the destination (permissions, disk), then "
            "rerun the same command with --resume"
        ) from exc


def disk_full(exc: OSError, folder: Path) -> str | None:
    """Why a failed write means the disk holding `folder` is full, or None if it does not."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc.strerror or os.strerror(exc.errno)
    if os.strerror(errno.ENOSPC) in str(exc):
        return os.strerror(errno.ENOSPC)
    if exc.errno not in (errno.EIO, None):  # a plain I/O error (h5py gives no errno)
        return None
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    return f"{exc.strerror or 'I/O error'} with {free} bytes free" \
        if free < LOW_SPACE_BYTES else None
