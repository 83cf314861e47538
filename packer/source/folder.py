"""An image folder as the source: `root/<class>/.../<image>`, walked with os.scandir.

Hidden and non-image files are ignored and counted; `x.txt` / `x.json` beside `x.jpg`
are its fields `txt` / `json` (sidecars). Names that are not valid UTF-8, entries that are
not regular files and unreadable folders are rejects, found without opening a file.
"""

from __future__ import annotations

import os
from pathlib import Path

from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.fields import SIDECARS, FieldChoice, repacked, sidecar_record
from packer.source.items import ItemsBuilder
from packer.source.kinds import Source, image_name, is_utf8, root_prefix
from packer.source.no_images import no_class_folders, no_images
from packer.source.wds_labels import UNLABELLED

NO_SIDECARS = sidecar_record("", {}, [])  # the fields record of an image without sidecars


def read_folder(root: Path, choice: FieldChoice | None = None) -> Source:
    """Scan `root/<class>/.../<image>`; hidden and non-image files are ignored and counted,
    but `x.txt` / `x.json` beside `x.jpg` are its fields `txt` / `json` (sidecars).

    With --label none every image below `root`, top level included, is class 0 of the
    one class `unlabelled` (a folder of images without class sub-folders)."""
    choice = choice or FieldChoice()
    unlabelled = choice.label == "none"
    classes = [] if unlabelled else sorted(
        entry.name
        for entry in os.scandir(root)
        if _kind(entry) in ("folder", "linked folder") and not entry.name.startswith(".")
    )
    ignored = 0 if unlabelled else sum(1 for entry in os.scandir(root)
                                       if entry.name not in classes)
    if not classes and not unlabelled:
        raise no_class_folders(root)
    for name in classes:
        if not is_utf8(name):
            raise SourceError(f"{root / name!s}: class folder name is not valid UTF-8; rename it")
    prefix = root_prefix(root)
    found = ItemsBuilder(prefix, errors="strict")  # names must be UTF-8 to become keys
    rejects: list[Reject] = []
    seen: set[str] = set()  # the sidecar suffixes found beside images
    for label, name in enumerate(classes or [""]):  # "": the root itself (--label none)
        ignored += _walk_images(prefix, name, label, found, rejects,
                                seen if choice.enabled else None)
    if unlabelled:
        classes = [UNLABELLED]
    if not len(found) and not rejects:  # an empty dataset would block the retry
        raise no_images(root, () if unlabelled else tuple(classes))
    rejects.sort(key=lambda reject: reject.path)  # the same whatever order the disk lists
    every = tuple(SIDECARS.values())
    sidecars = [spec for suffix, spec in SIDECARS.items() if suffix in seen]
    fields = choice.chosen(choice.retyped(sidecars, str(root), fixed=True), str(root))
    if not fields:
        found.map_fields(None)  # no sidecars (or --no-fields): rows without fields
    elif fields != every:  # the records hold (txt, json): keep the fields chosen
        keep = [every.index(spec) for spec in fields]
        found.map_fields(lambda record: repacked(record, len(every), keep))
    return Source(root, found.build(rejects), tuple(classes), rejects, ignored, fields=fields)


def _kind(entry: os.DirEntry[str]) -> str:
    """What a folder entry is, without following a symlink to a folder (loops)."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return "hidden folder" if entry.name.startswith(".") else "folder"
        if entry.is_symlink():
            if entry.is_dir():
                return "linked folder"
            return "file" if entry.is_file() else "a broken link"
        return "file" if entry.is_file(follow_symlinks=False) else "not a regular file"
    except OSError:  # a link loop, a vanished entry
        return "a broken link"


def _walk_images(prefix: str, name: str, label: int, found: ItemsBuilder,
                 rejects: list[Reject], seen: set[str] | None) -> int:
    """Add the image files below class folder `name` to `found`; count ignored entries.

    Symlinked folders are not followed, so a symlink loop cannot trap the scan. Image
    names that are not regular files (a FIFO would block the reader forever, a broken
    link), names that are not valid UTF-8 and unreadable folders become rejects. Plain
    strings and os.scandir, no pathlib: this runs once per file. The order of the walk
    does not matter, the items are sorted by key afterwards. `seen` (None: no fields)
    collects the sidecar suffixes found beside an image, whose row then carries the
    (txt, json) fields record; a sidecar that is not beside an image is ignored.
    """
    ignored = 0
    pending = [name]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(prefix + rel_dir or ".") as listing:
                entries = list(listing)
        except OSError as exc:
            reason = f"unreadable folder: {exc.strerror or exc}; its images were not packed"
            rejects.append(Reject(-1, prefix + rel_dir, reason))
            continue
        sidecars, used = _sidecars(entries, seen)
        for entry in entries:
            rel = rel_dir + os.sep + entry.name if rel_dir else entry.name
            kind = _kind(entry)
            if kind == "folder":
                pending.append(rel)
            elif kind == "linked folder" or not image_name(entry.name):
                ignored += entry.name not in used
            elif kind != "file":
                rejects.append(_unusable(prefix, rel, kind))
            else:
                _add_image(prefix, rel, label, found, rejects, sidecars)
    return ignored


def _sidecars(entries: list[os.DirEntry[str]], seen: set[str] | None
              ) -> tuple[dict[str, dict[str, str]] | None, set[str]]:
    """{image stem: {sidecar suffix: the suffix as the file has it (`.TXT`)}} of one folder
    (None: no fields), and the names of the sidecars used (`x.txt` wins over `x.TXT`)."""
    used: set[str] = set()
    if seen is None:
        return None, used
    found: dict[str, dict[str, str]] = {}
    images = {entry.name[: entry.name.rfind(".")] for entry in entries
              if image_name(entry.name) and "." in entry.name}
    for entry in entries:
        stem, dot, ext = entry.name.rpartition(".")
        suffix = dot + ext.lower()
        if dot and suffix in SIDECARS and stem in images and _kind(entry) == "file":
            beside = found.setdefault(stem, {})
            if suffix not in beside or dot + ext == suffix:
                beside[suffix] = dot + ext
            used.add(entry.name)
            seen.add(suffix)
    return found, used


def _add_image(prefix: str, rel: str, label: int, found: ItemsBuilder,
               rejects: list[Reject], sidecars: dict[str, dict[str, str]] | None) -> None:
    """Add an image file (with its sidecar fields when the scan takes them)."""
    record = b""
    if sidecars is not None:
        base = rel[rel.rfind(os.sep) + 1 :]
        beside = sidecars.get(base[: base.rfind(".")])
        record = sidecar_record(prefix + rel, beside, rejects) if beside else NO_SIDECARS
    if not _add_file(found, rel, label, record):
        rejects.append(_unusable(prefix, rel, "file"))


def _unusable(prefix: str, rel: str, kind: str) -> Reject:
    """Why an image name cannot be packed: an undecodable name, or not a regular file."""
    if not is_utf8(rel):
        printable = os.fsencode(prefix + rel).decode("utf-8", "backslashreplace")
        return Reject(-1, printable, "file name is not valid UTF-8; rename it")
    return Reject(-1, prefix + rel, f"unreadable: {kind}")


def _add_file(found: ItemsBuilder, rel: str, label: int, fields: bytes = b"") -> bool:
    """Add an image file; False if its name is not valid UTF-8 (nothing is added).

    The key is `rel` without its extension, so the path is kept as key + extension.
    """
    dot = rel.rfind(".")
    try:
        if os.sep == "/":
            found.add_file(rel[:dot], rel[dot:], label, fields)
        else:
            found.add(rel[:dot].replace(os.sep, "/"), rel, label, fields)
    except UnicodeEncodeError:
        return False
    return True
