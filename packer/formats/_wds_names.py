"""The file names of a wds dataset: shards carry the dataset's name.

    photos.wds/                 DST (a folder or a URL); its name without the suffix,
      photos-00000.tar          sanitised, is the stem of every shard
      photos-00001.tar ...
      photos.wids.json          the wids shard index

Why the name: caches keyed by a shard's base name (wids' `cache_dir`, a `cp` of
several datasets into one folder) would serve one dataset's `shard-00000.tar` for
another's. A dataset's shards may carry another stem (`shard`, or a name DST had at
conversion); index.json lists every shard by name, so readers and verify follow it and
never guess names, and a resumed conversion goes on with the names its shards already
have.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from packer.core.index import ShardInfo
from packer.storage.files import PARTIAL_SUFFIX

DEFAULT_STEM = "shard"  # the stem when nothing of the dataset's name is left
MAX_STEM = 64  # bytes: leaves room for -NNNNN.tar(.partial) within any file system's 255
WIDS_SUFFIX = ".wids.json"
_SHARD = re.compile(r"(?P<stem>[A-Za-z0-9_-]+)-[0-9]{5,}\.tar")
_WIDS = re.compile(r"[A-Za-z0-9_-]+" + re.escape(WIDS_SUFFIX))
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def name_of(dst: str | os.PathLike[str]) -> str:
    """The dataset's name: the last component of DST (a path or a URL) without its suffix."""
    text = os.fspath(dst)
    if "://" in text:
        last = text.rstrip("/").rsplit("/", 1)[-1]
    else:
        last = Path(os.path.abspath(text)).name
    return PurePosixPath(last).stem if last else ""


def shard_stem(name: str) -> str:
    """`name` made safe for file names and URLs: runs of anything but [A-Za-z0-9_-] become
    one `_`, at most MAX_STEM characters, `shard` when nothing is left."""
    stem = _UNSAFE.sub("_", name).strip("_-")[:MAX_STEM].strip("_-")
    return stem or DEFAULT_STEM


def shard_name(number: int, stem: str = DEFAULT_STEM) -> str:
    return f"{stem}-{number:05d}.tar"


def is_ours(name: str) -> bool:
    """Whether a file name is one a wds conversion writes: a shard of any dataset name,
    a wids index, or the temporary name of either."""
    name = name.removesuffix(PARTIAL_SUFFIX)
    return _SHARD.fullmatch(name) is not None or is_wids_index(name)


def is_wids_index(name: str) -> bool:
    return _WIDS.fullmatch(name) is not None


def stem_of(dst: str | os.PathLike[str], kept: Sequence[ShardInfo], name: str | None = None
            ) -> str:
    """The stem a run writes with: that of the shards already kept, else the dataset's
    name (`name`, or DST's without its suffix) made safe (`shard_stem`).

    Kept shards of another stem (`shard-`, or a DST renamed since) set the stem, so a
    dataset never mixes two names.
    """
    match = _SHARD.fullmatch(kept[0].name) if kept else None
    return match["stem"] if match else shard_stem(name_of(dst) if name is None else name)


def remove_strays(folder: Path, kept: Sequence[ShardInfo]) -> None:
    """Delete shard files an interrupted run left beyond the shards resume keeps (one
    being written, one committed but not journalled, one of another stem): the run
    writes them again, and no stray file may outlive it."""
    names = {shard.name for shard in kept}
    for path in folder.iterdir():
        if path.name not in names and _SHARD.fullmatch(path.name.removesuffix(PARTIAL_SUFFIX)):
            path.unlink()
