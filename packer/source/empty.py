"""The error for an image folder (or archive) that holds no image: what was found, and
the layout.

A conversion of such a folder would write an empty dataset that then blocks the retry
(`already holds a complete dataset`), so the scan refuses it before DST is touched.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from packer.errors import SourceError
from packer.source.names import IMAGE_EXTENSIONS

LAYOUT = "SRC/<class>/<image>"
SHOWN = 4  # suffixes named in the message; the rest are counted


def no_images(root: Path, classes: tuple[str, ...]) -> SourceError:
    """The one-line error for `root`, whose class folders `classes` hold no image file."""
    found = _found(root, classes)
    suffixes = ", ".join(sorted(IMAGE_EXTENSIONS))
    return SourceError(f"{root}: no images found ({found}); lay images out as {LAYOUT} "
                       f"with one of {suffixes}, or pass a .csv/.jsonl manifest")


def _found(root: Path, classes: tuple[str, ...]) -> str:
    """`3 other files (.txt x2, .md) in 1 class folder (cat)`, or `no files in ...`."""
    counts: Counter[str] = Counter()
    for name in classes:
        for _folder, _subfolders, names in os.walk(root / name):
            counts.update(Path(file).suffix.lower() or "(no suffix)" for file in names)
    shown = ", ".join(suffix if count == 1 else f"{suffix} x{count}"
                      for suffix, count in counts.most_common(SHOWN))
    more = len(counts) - SHOWN
    files = sum(counts.values())
    what = (f"{files} other file{'s' * (files != 1)} ({shown}{f', +{more} more' * (more > 0)})"
            if files else "no files")
    folders = "class folder" if len(classes) == 1 else "class folders"
    listed = ", ".join(classes[:SHOWN]) + (", ..." if len(classes) > SHOWN else "")
    return f"{what} in {len(classes)} {folders}: {listed}"


def other_members(names: set[str]) -> str:
    """`3 other members (.txt x2, .mp)`, or `no other members`."""
    counts = Counter("." + name.rpartition(".")[2].lower() if "." in name.rsplit("/", 1)[-1]
                     else "(no suffix)" for name in names)
    shown = ", ".join(suffix if count == 1 else f"{suffix} x{count}"
                      for suffix, count in counts.most_common(4))
    more = f", +{len(counts) - 4} more" if len(counts) > 4 else ""
    count = f"{len(names)} other member{'s' * (len(names) != 1)}"
    return f"{count}: {shown}{more}" if names else "no other members"

