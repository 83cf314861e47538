"""Which SRC names WebDataset shards, and the shard files it names.

    shards-{000000..000099}.tar   a brace list, as webdataset and img2dataset write
                                  it: numeric ranges keep their zero padding, `{a,b}`
                                  lists are alternatives (braceexpand's rules)
    a folder of shards            a folder whose files include .tar/.tgz/.tar.gz and
                                  that holds no sub-folder (img2dataset's output:
                                  `00000.tar` with `00000.parquet`, `00000_stats.json`
                                  beside it, which are not samples)
    one .tar / .tgz               an archive whose samples lie at its top level
                                  (`KEY.jpg`, `KEY.cls`) or that holds `.cls` members:
                                  the archive scan decides, and a class-folder
                                  archive stays one

Shards are taken in name order, so the scan (and sample i) is the same on every run.
"""

from __future__ import annotations

import re
import tarfile
import zlib
from pathlib import Path

from packer.errors import SourceError
from packer.source.names import IMAGE_EXTENSIONS

SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz")
BRACE = re.compile(r"\{([^{}]*)\}")
RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")
MAX_SHARDS = 1_000_000  # a brace list beyond this is a typo, not a dataset
PROBED = 64  # members an archive's layout is told from


def is_shard_name(name: str) -> bool:
    """A file name a webdataset shard has."""
    return name.lower().endswith(SHARD_SUFFIXES) and not name.startswith(".")


def has_braces(text: str) -> bool:
    return BRACE.search(text) is not None


def expand_braces(pattern: str) -> list[str]:
    """Every name a brace pattern spells, in its order (`a{1..3}` -> a1, a2, a3)."""
    match = BRACE.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    inner = match.group(1)
    span = RANGE.fullmatch(inner)
    if span is not None:
        first, last = span.group(1), span.group(2)
        step = 1 if int(last) >= int(first) else -1
        count = abs(int(last) - int(first)) + 1
        if count > MAX_SHARDS:
            raise SourceError(f"{pattern}: the range {{{inner}}} names {count} shards; "
                              f"at most {MAX_SHARDS}")
        width = len(first) if first.lstrip("-").startswith("0") else 0
        choices = [str(n).zfill(width) for n in range(int(first), int(last) + step, step)]
    else:
        choices = inner.split(",")
    return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def brace_shards(pattern: str) -> list[Path]:
    """The shard files of a brace list; every one must exist."""
    paths = [Path(name) for name in expand_braces(pattern)]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SourceError(f"{pattern}: shard {missing[0]} does not exist{more}; fix the "
                          "brace list or download the missing shards")
    return paths


def folder_shards(folder: Path) -> list[Path] | None:
    """The shards of a folder of shards, in name order; None when the folder holds a
    sub-folder (an image folder) or no shard."""
    shards: list[Path] = []
    try:
        for entry in folder.iterdir():
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                return None
            if is_shard_name(entry.name) and entry.is_file():
                shards.append(entry)
    except OSError as exc:
        raise SourceError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from exc
    return sorted(shards) or None


def looks_like_wds(path: Path) -> bool:
    """Whether an archive holds webdataset samples rather than class folders: among its
    first members, an image or `.cls` file at the top level, or any `.cls` member.
    Damage and other archive kinds answer False (the archive scan words the error)."""
    name = path.name.lower()
    if not name.endswith(SHARD_SUFFIXES):
        return False
    try:
        with tarfile.open(path, "r|*") as tar:
            for _ in range(PROBED):
                member = tar.next()
                if member is None:
                    return False
                if member.isfile() and _sample_member(member.name):
                    return True
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return False
    return False


def _sample_member(name: str) -> bool:
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or parts[-1].startswith("."):
        return False
    suffix = parts[-1].rpartition(".")[2].lower()
    return suffix == "cls" or (len(parts) == 1 and "." + suffix in IMAGE_EXTENSIONS
                               and not parts[-1].lower().endswith(".tar"))
