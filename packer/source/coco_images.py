"""Where the `file_name`s of a COCO annotations file are found: a folder or an archive.

    FolderImages    `file_name` relative to an image folder, a file on disk
    ArchiveImages   `file_name` a member path of a .tar, tar of tars, .tgz or .zip,
                    read in place (as an archive source); when every member lies in one
                    top-level folder (COCO's train2017.zip holds `train2017/...`), a name
                    that is not a member is looked up in that folder too

Either way the key is the `file_name` without its extension, the one class is named
after the folder (or the archive's top folder, or the archive less its suffix), so
converting an archive gives the dataset its extracted folder gives. A name that is
outside, missing, a link or a duplicated member raises _Missing with the reason, which
the COCO scan turns into a reject naming the image id.

The archive's members are kept as a {name: row} dict while the JSON is matched: a
COCO scan holds the parsed JSON anyway, an object per image, so this costs no more in
kind; the member table kept for reading is compact (`MemberTable`).
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from packer.source.archive import checked_kind, clean_name, list_members, member_origin
from packer.source.items import SourceItems
from packer.source.members import ArchiveSource, Columns, Entry, stat_archive

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
TWICE = "the archive holds two members of this name; rename one"


class _Missing(Exception):
    """Why a `file_name` names no readable image (a reject's reason)."""


class ImageFiles(Protocol):
    """What the COCO scan asks of the place its images are in."""

    prefix: str  # joins an item's tail into its path

    def locate(self, name: str) -> tuple[str, str]:
        """(the name relative to the images, its tail); raises _Missing."""
        ...

    def path_of(self, name: str) -> str:
        """The path a reject about `file_name` names."""
        ...

    def class_name(self) -> str:
        """The one class's name (asked after every name was located)."""
        ...

    def finish(self, built: SourceItems, order: npt.NDArray[np.intp]
               ) -> tuple[SourceItems, ArchiveSource | None]:
        """The items with their reader; `order`: the located row of each item."""
        ...


class FolderImages:
    """`file_name`s relative to an image folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix = os.path.join(str(root), "")

    def locate(self, name: str) -> tuple[str, str]:
        full = os.path.join(str(self.root), name)
        rel = os.path.relpath(full, self.root).replace(os.sep, "/")
        if os.path.isabs(name) or rel == ".." or rel.startswith("../"):
            raise _Missing(f"its file {name!r} is outside {self.root}; file_name is relative "
                          "to the image folder")
        if not os.path.isfile(full):
            raise _Missing(f"its file {name!r} does not exist in {self.root}")
        return rel, rel

    def path_of(self, name: str) -> str:
        return os.path.join(str(self.root), name)

    def class_name(self) -> str:
        return self.root.resolve().name or "images"

    def finish(self, built: SourceItems, order: npt.NDArray[np.intp]
               ) -> tuple[SourceItems, ArchiveSource | None]:
        return built, None


class _Members:
    """A listing sink: member name -> its row in `columns`, or why it cannot be read."""

    def __init__(self) -> None:
        self.rows: dict[str, int | str] = {}
        self.columns = Columns()
        self.tops: set[str] = set()  # first parts of every member path
        self.nested = False  # some member lies below a folder

    def add(self, entry: Entry) -> None:
        name = clean_name(entry.name)
        if not name:  # escapes the archive (no clean file_name names it), or the root
            return
        self.tops.add(name.split("/", 1)[0])
        self.nested = self.nested or "/" in name
        if entry.kind == "dir":
            return
        if name in self.rows:
            self.rows[name] = TWICE
        elif entry.kind != "file":
            self.rows[name] = entry.kind
        else:
            self.rows[name] = len(self.columns.offsets)
            self.columns.append(entry)


class ArchiveImages:
    """`file_name`s that are member paths of an archive, read in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kind = checked_kind(path)
        self.before = stat_archive(path)
        self.members = list_members(path, self.kind, self.before, _Members)
        tops = self.members.tops
        self.top = next(iter(tops)) if len(tops) == 1 and self.members.nested else None
        self.prefix = f"{path}:"
        self.picked = array("q")  # the member row of each located name
        self.in_top = False

    def locate(self, name: str) -> tuple[str, str]:
        clean = clean_name(name)
        if not clean:
            raise _Missing(f"its file {name!r} is outside {self.path}; file_name is a "
                          "member path of the archive")
        member, row = clean, self.members.rows.get(clean)
        if row is None and self.top is not None:
            member = f"{self.top}/{clean}"
            row = self.members.rows.get(member)
        if row is None:
            raise _Missing(f"its file {name!r} is not a member of {self.path}")
        if isinstance(row, str):
            raise _Missing(f"its member {self.prefix}{member}: {row}")
        self.picked.append(row)
        self.in_top = self.in_top or member != clean
        return clean, member

    def path_of(self, name: str) -> str:
        return self.prefix + name

    def class_name(self) -> str:
        if self.in_top and self.top is not None:
            return self.top
        name = self.path.name
        suffix = next((s for s in ARCHIVE_SUFFIXES if name.lower().endswith(s)), "")
        return name[: len(name) - len(suffix)] or "images"

    def finish(self, built: SourceItems, order: npt.NDArray[np.intp]
               ) -> tuple[SourceItems, ArchiveSource | None]:
        table = self.members.columns.table(np.asarray(self.picked, np.intp)[order])
        origin = member_origin(self.path, self.kind, self.before, built, built.labels, table)
        return SourceItems(built.prefix, built.keys, built.tails, built.labels, origin,
                           fields=built.fields), origin
