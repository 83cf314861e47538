"""Find the inputs: an image folder (class sub-folders), a CSV/JSONL manifest, an archive
(.tar, tar of tars, .zip: see packer.source.archive), or a packed dataset (a folder with
index.json: format to format, see packer.source.packed).

Items come back sorted by key, so sample i is the same image in every format made from
the same source. The key is the path relative to the root, without its extension,
`/`-separated. Problems that can be seen without opening a file (unknown class,
duplicate key) become rejects here; unreadable or broken files are found by encode.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.archive import archive_kind, scan_archive
from packer.source.items import ItemsBuilder, SourceItems
from packer.source.members import ArchiveSource
from packer.source.names import image_name
from packer.source.packed import PackedSource, is_packed, read_rejects

MANIFEST_SUFFIXES = (".csv", ".jsonl")
MAX_CLASSES = 1_000_000


@dataclass(frozen=True)
class Source:
    """What a scan found: items to encode, class names, early rejects, ignored files.

    `archive` is set when SRC is a .tar or .zip (packer.source.archive): its items are
    its members, read as the extracted files would be. `origin` is set when SRC is a
    packed dataset: its items are that dataset's samples, in its order, and `origin`
    reads their bytes; `inherited` are the rejects of the conversion that made it (they
    carry over, so the lineage to the images stays whole).
    """

    root: Path
    items: SourceItems
    class_names: tuple[str, ...]
    rejects: list[Reject]
    num_ignored: int
    origin: PackedSource | None = None
    inherited: list[Reject] = field(default_factory=list)
    archive: ArchiveSource | None = None  # SRC is an archive: reads its members by offset


def scan(src: str | Path) -> Source:
    """Scan an image folder, a manifest file, an archive (.tar, .zip) or a packed dataset."""
    path = Path(src)
    if path.is_file() and archive_kind(path) is not None:
        items, class_names, rejects, ignored, archive = scan_archive(path)
        return Source(path, items, class_names, rejects, ignored, archive=archive)
    if path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
        return scan_manifest(path)
    if is_packed(path):
        return scan_packed(path)
    if path.is_dir():
        return scan_folder(path)
    if path.exists():
        raise SourceError(f"{path}: not a folder, .csv or .jsonl manifest, .tar or .zip "
                          "archive; pass one of those")
    raise SourceError(f"{path}: no such file or folder; check the source path")


def scan_packed(folder: Path) -> Source:
    """The samples of a packed dataset, in its order, with its keys, labels and classes."""
    origin = PackedSource(folder)
    index = origin.index
    return Source(folder, origin.items(root_prefix(folder)), index.class_names, [],
                  index.num_ignored, origin, read_rejects(folder))


def key_of(relative: str) -> str:
    """The stable key of a file: relative posix path without the extension."""
    pure = PurePosixPath(relative)
    return str(pure.with_suffix("")) if pure.suffix else str(pure)


def root_prefix(root: Path) -> str:
    """What joins the root to a relative path, spelled as pathlib's `root / rel` spells it."""
    text = str(root)
    return "" if text == "." else os.path.join(text, "")


def scan_folder(root: Path) -> Source:
    """Scan `root/<class>/.../<image>`; hidden and non-image files are ignored and counted."""
    classes = sorted(
        entry.name
        for entry in os.scandir(root)
        if _kind(entry) in ("folder", "linked folder") and not entry.name.startswith(".")
    )
    ignored = sum(1 for entry in os.scandir(root) if entry.name not in classes)
    if not classes:
        raise SourceError(
            f"{root}: no class sub-folders found; lay images out as SRC/<class>/<image> "
            "or pass a .csv/.jsonl manifest"
        )
    for name in classes:
        if not _is_utf8(name):
            raise SourceError(f"{root / name!s}: class folder name is not valid UTF-8; rename it")
    prefix = root_prefix(root)
    found = ItemsBuilder(prefix, errors="strict")  # names must be UTF-8 to become keys
    rejects: list[Reject] = []
    for label, name in enumerate(classes):
        ignored += _walk_images(prefix, name, label, found, rejects)
    rejects.sort(key=lambda reject: reject.path)  # the same whatever order the disk lists
    return Source(root, found.build(rejects), tuple(classes), rejects, ignored)


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


def _is_utf8(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes from the file system)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk_images(prefix: str, name: str, label: int, found: ItemsBuilder,
                 rejects: list[Reject]) -> int:
    """Add the image files below class folder `name` to `found`; count ignored entries.

    Symlinked folders are not followed, so a symlink loop cannot trap the scan. Image
    names that are not regular files (a FIFO would block the reader forever, a broken
    link), names that are not valid UTF-8 and unreadable folders become rejects. Plain
    strings and os.scandir, no pathlib: this runs once per file. The order of the walk
    does not matter, the items are sorted by key afterwards.
    """
    ignored = 0
    pending = [name]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(prefix + rel_dir) as listing:
                entries = list(listing)
        except OSError as exc:
            reason = f"unreadable folder: {exc.strerror or exc}; its images were not packed"
            rejects.append(Reject(-1, prefix + rel_dir, reason))
            continue
        for entry in entries:
            rel = rel_dir + os.sep + entry.name
            kind = _kind(entry)
            if kind == "folder":
                pending.append(rel)
            elif kind == "linked folder" or not image_name(entry.name):
                ignored += 1
            elif kind != "file" or not _add_file(found, rel, label):
                rejects.append(_unusable(prefix, rel, kind))
    return ignored


def _unusable(prefix: str, rel: str, kind: str) -> Reject:
    """Why an image name cannot be packed: an undecodable name, or not a regular file."""
    if not _is_utf8(rel):
        printable = os.fsencode(prefix + rel).decode("utf-8", "backslashreplace")
        return Reject(-1, printable, "file name is not valid UTF-8; rename it")
    return Reject(-1, prefix + rel, f"unreadable: {kind}")


def _add_file(found: ItemsBuilder, rel: str, label: int) -> bool:
    """Add an image file; False if its name is not valid UTF-8 (nothing is added).

    The key is `rel` without its extension, so the path is kept as key + extension.
    """
    dot = rel.rfind(".")
    try:
        if os.sep == "/":
            found.add_file(rel[:dot], rel[dot:], label)
        else:
            found.add(rel[:dot].replace(os.sep, "/"), rel, label)
    except UnicodeEncodeError:
        return False
    return True


def scan_manifest(manifest: Path) -> Source:
    """Scan a manifest of `path,label` rows; labels are class names or integers.

    Two passes over the rows (class names first), so no list of rows is kept.
    """
    root = manifest.parent
    class_names = _class_names(manifest)
    lookup = {name: i for i, name in enumerate(class_names)}
    found = ItemsBuilder("")
    rejects: list[Reject] = []
    for path_text, label_text in _read_manifest_rows(manifest):
        full = path_text if os.path.isabs(path_text) else os.path.join(root, path_text)
        label = _label_of(label_text, lookup, len(class_names))
        if label is None:
            rejects.append(Reject(-1, full, f"unknown class {label_text!r} in the manifest"))
            continue
        found.add(key_of(os.path.relpath(full, root).replace(os.sep, "/")), full, label)
    return Source(root, found.build(rejects), class_names, rejects, 0)


def _read_manifest_rows(manifest: Path) -> Iterable[tuple[str, str]]:
    try:
        text = manifest.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{manifest}: cannot read the manifest ({exc})") from exc
    if manifest.suffix.lower() == ".csv":
        # Not splitlines(): it also splits at \f, \x1c, \u2028 ..., which file names
        # may hold, and breaks quoted fields that span lines.
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames or not {"path", "label"} <= set(reader.fieldnames):
            raise SourceError(f"{manifest}: the header row must name `path` and `label` columns")
        for row in reader:
            yield str(row["path"]).strip(), str(row["label"]).strip()
        return
    for number, line in enumerate(text.split("\n"), start=1):  # JSON strings may hold \u2028
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            label = obj["label"]
            yield str(obj["path"]), "" if label is None else str(label)  # null: no class
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise SourceError(
                f"{manifest}:{number}: each line must be a JSON object with `path` and `label`"
            ) from exc


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _class_names(manifest: Path) -> tuple[str, ...]:
    """Named labels: the sorted names. All-integer labels: "0" .. str(max)."""
    names: set[str] = set()
    top, all_int, any_row = -1, True, False
    for _, label in _read_manifest_rows(manifest):
        any_row = True
        if _is_int(label):
            top = max(top, int(label))
        else:
            all_int = False
            if label:
                names.add(label)
    if any_row and all_int:
        if top >= MAX_CLASSES:  # one name per id: a stray big number would exhaust memory
            raise SourceError(
                f"{manifest}: integer label {top} is not a class id (labels are 0..C-1, "
                f"C at most {MAX_CLASSES}); fix the label column or use class names"
            )
        return tuple(str(i) for i in range(top + 1))
    return tuple(sorted(names))


def _label_of(text: str, lookup: dict[str, int], num_classes: int) -> int | None:
    """An integer label is a class id; any other text must be a known class name."""
    if _is_int(text):
        value = int(text)
        return value if 0 <= value < num_classes else None
    return lookup.get(text)
