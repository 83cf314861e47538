"""Decide what to do with DST before a conversion: create, refuse, overwrite or resume."""

from __future__ import annotations

import shutil
from pathlib import Path

from packer.errors import DatasetExistsError, SourceError
from packer.index import INDEX_NAME
from packer.journal import STATE_DIR

OUR_NAMES = ("index.json", "samples.npy", "keys.npy", "rejects.jsonl", "data.lmdb", "data.h5",
             "images.npy", "labels.npy", STATE_DIR)
OUR_PATTERNS = ("shard-*.tar", "*.partial")


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


def prepare(folder: Path, resume: bool, overwrite: bool) -> None:
    """Make `folder` ready, refusing to clobber a dataset or somebody else's files."""
    if folder.exists() and not folder.is_dir():
        raise DatasetExistsError(f"{folder}: exists and is not a folder; choose another DST")
    folder.mkdir(parents=True, exist_ok=True)
    complete = (folder / INDEX_NAME).exists()
    unfinished = (folder / STATE_DIR).exists()
    if overwrite:
        clear(folder)
    elif complete:
        raise DatasetExistsError(
            f"{folder}: already holds a complete dataset; pass --overwrite to replace it"
        )
    elif unfinished and not resume:
        raise DatasetExistsError(
            f"{folder}: holds an unfinished conversion; pass --resume to continue it or "
            "--overwrite to start over"
        )
    foreign = [p.name for p in folder.iterdir() if not _ours(p)]
    if foreign:
        raise DatasetExistsError(
            f"{folder}: not empty (found {foreign[0]!r}); choose an empty or new DST folder"
        )


def _ours(path: Path) -> bool:
    return path.name in OUR_NAMES or any(path.match(p) for p in OUR_PATTERNS)


def clear(folder: Path) -> None:
    """Remove what an earlier conversion left (index first, so nothing looks complete)."""
    (folder / INDEX_NAME).unlink(missing_ok=True)
    for path in sorted(folder.iterdir()):
        if not _ours(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
