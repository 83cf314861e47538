"""The error for an image folder (or archive) that holds no image: what was found, and
the layout.

A conversion of such a folder would write an empty dataset that then blocks the retry
(`already holds a complete dataset`), so the scan refuses it before DST is touched.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from packer.core.layout import INDEX_NAME, STATE_DIR
from packer.errors import SourceError
from packer.source.kinds import IMAGE_EXTENSIONS, image_name

LAYOUT = "SRC/<class>/<image>"
SHOWN = 4  # suffixes named in the message; the rest are counted


def no_class_folders(root: Path) -> SourceError:
    """The one-line error for a folder without class sub-folders: how many images lie at
    its top level, and the ways to pack them (--label none, class folders, a manifest)."""
    count = top_level_images(root)
    images = f"{count} image{'s' * (count != 1)} at the top level"
    return SourceError(f"{root}: no class sub-folders found ({images}); pack the images "
                       "unlabelled with --label none, lay them out as "
                       f"{LAYOUT}, or pass a .csv/.jsonl manifest")


def top_level_images(root: Path) -> int:
    """The image files directly in `root` (hidden names aside)."""
    try:
        with os.scandir(root) as listing:
            return sum(1 for entry in listing
                       if not entry.name.startswith(".") and image_name(entry.name))
    except OSError:
        return 0


def no_images(root: Path, classes: tuple[str, ...]) -> SourceError:
    """The one-line error for `root`, whose class folders `classes` hold no image file
    (no classes: `root` itself was walked, --label none)."""
    found = _found(root, classes)
    suffixes = ", ".join(sorted(IMAGE_EXTENSIONS))
    return SourceError(f"{root}: no images found ({found}); lay images out as {LAYOUT} "
                       f"with one of {suffixes}, or pass a .csv/.jsonl manifest")


def _found(root: Path, classes: tuple[str, ...]) -> str:
    """`3 other files (.txt x2, .md) in 1 class folder (cat)`, or `no files in ...`."""
    counts: Counter[str] = Counter()
    for name in classes or ("",):
        for _folder, _subfolders, names in os.walk(root / name):
            counts.update(Path(file).suffix.lower() or "(no suffix)" for file in names)
    shown = ", ".join(suffix if count == 1 else f"{suffix} x{count}"
                      for suffix, count in counts.most_common(SHOWN))
    more = len(counts) - SHOWN
    files = sum(counts.values())
    what = (f"{files} other file{'s' * (files != 1)} ({shown}{f', +{more} more' * (more > 0)})"
            if files else "no files")
    if not classes:
        return f"{what} in the folder or below"
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


def not_a_dataset(folder: Path) -> SourceError | None:
    """The error for a dataset path that is an image folder rather than a packed dataset
    (no index.json, no conversion state, images in it); None for anything else, whose
    own error (an unfinished conversion, no such folder) says what happened."""
    if not folder.is_dir() or (folder / INDEX_NAME).exists() or (folder / STATE_DIR).exists():
        return None
    top = top_level_images(folder)
    classes = 0
    below = 0
    with os.scandir(folder) as listing:
        subfolders = [entry.path for entry in listing
                      if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)]
    for path in subfolders:
        count = sum(1 for _place, _folders, names in os.walk(path)
                    for name in names if image_name(name))
        classes += count > 0
        below += count
    if not top and not below:  # an empty folder is most often a conversion's DST, killed
        return None  # before it wrote anything: the unfinished-conversion error says so
    if below:
        held = f"{below} image{'s' * (below != 1)} in {classes} class folder{'s' * (classes != 1)}"
        how = f"pack convert {folder} OUT.wds --to wds"
        if top:
            held += f" and {top} at the top level, which class folders leave out"
    else:
        held = f"{top} image{'s' * (top != 1)} at the top level, no class folders"
        how = f"pack convert {folder} OUT.wds --to wds --label none"
    return SourceError(f"{folder} is not a packed dataset (it holds {held}); pack it with: "
                       f"{how}")
