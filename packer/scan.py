"""Find the input images: an image folder (class sub-folders) or a CSV/JSONL manifest.

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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packer.errors import SourceError
from packer.record import Reject, SourceItem

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
)
MANIFEST_SUFFIXES = (".csv", ".jsonl")
MAX_CLASSES = 1_000_000


@dataclass(frozen=True)
class Source:
    """What a scan found: items to encode, class names, early rejects, ignored files."""

    root: Path
    items: list[SourceItem]
    class_names: tuple[str, ...]
    rejects: list[Reject]
    num_ignored: int


def scan(src: str | Path) -> Source:
    """Scan an image folder or a manifest file."""
    path = Path(src)
    if path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
        return scan_manifest(path)
    if path.is_dir():
        return scan_folder(path)
    if path.exists():
        raise SourceError(f"{path}: not a folder, .csv or .jsonl manifest; pass one of those")
    raise SourceError(f"{path}: no such file or folder; check the source path")


def key_of(relative: str) -> str:
    """The stable key of a file: relative posix path without the extension."""
    pure = PurePosixPath(relative)
    return str(pure.with_suffix("")) if pure.suffix else str(pure)


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
    found: list[tuple[str, str, int]] = []
    rejects: list[Reject] = []
    for label, name in enumerate(classes):
        files, skipped = _walk_images(root / name, rejects)
        ignored += skipped
        found.extend((os.path.join(name, rel), str(root / name / rel), label) for rel in files)
    return _build(root, found, tuple(classes), rejects, ignored)


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


def _ignored(name: str, kind: str) -> bool:
    """Hidden entries, linked folders and names without an image extension."""
    return (name.startswith(".") or kind == "linked folder"
            or Path(name).suffix.lower() not in IMAGE_EXTENSIONS)


def _is_utf8(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes from the file system)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _walk_images(folder: Path, rejects: list[Reject]) -> tuple[list[str], int]:
    """Relative paths of image files below `folder` and the number of ignored entries.

    Symlinked folders are not followed, so a symlink loop cannot trap the scan. Image
    names that are not regular files (a FIFO would block the reader forever, a broken
    link), names that are not valid UTF-8 and unreadable folders become rejects.
    """
    files: list[str] = []
    ignored = 0
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(folder / rel_dir) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as exc:
            reason = f"unreadable folder: {exc.strerror or exc}; its images were not packed"
            rejects.append(Reject(-1, str(folder / rel_dir), reason))
            continue
        for entry in entries:
            rel = os.path.join(rel_dir, entry.name) if rel_dir else entry.name
            kind = _kind(entry)
            if kind == "folder":
                pending.append(rel)
            elif _ignored(entry.name, kind):
                ignored += 1
            elif not _is_utf8(rel):
                printable = os.fsencode(folder / rel).decode("utf-8", "backslashreplace")
                rejects.append(Reject(-1, printable, "file name is not valid UTF-8; rename it"))
            elif kind != "file":
                rejects.append(Reject(-1, str(folder / rel), f"unreadable: {kind}"))
            else:
                files.append(rel)
    return files, ignored


def scan_manifest(manifest: Path) -> Source:
    """Scan a manifest of `path,label` rows; labels are class names or integers."""
    rows = list(_read_manifest_rows(manifest))
    root = manifest.parent
    class_names = _class_names([label for _, label in rows], manifest)
    lookup = {name: i for i, name in enumerate(class_names)}
    found: list[tuple[str, str, int]] = []
    rejects: list[Reject] = []
    for path_text, label_text in rows:
        full = path_text if os.path.isabs(path_text) else os.path.join(root, path_text)
        label = _label_of(label_text, lookup, len(class_names))
        if label is None:
            rejects.append(Reject(-1, full, f"unknown class {label_text!r} in the manifest"))
            continue
        found.append((os.path.relpath(full, root), full, label))
    return _build(root, found, class_names, rejects, 0)


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


def _class_names(labels: list[str], manifest: Path) -> tuple[str, ...]:
    """Named labels: the sorted names. All-integer labels: "0" .. str(max)."""
    if labels and all(_is_int(label) for label in labels):
        top = max(int(label) for label in labels)
        if top >= MAX_CLASSES:  # one name per id: a stray big number would exhaust memory
            raise SourceError(
                f"{manifest}: integer label {top} is not a class id (labels are 0..C-1, "
                f"C at most {MAX_CLASSES}); fix the label column or use class names"
            )
        return tuple(str(i) for i in range(top + 1))
    return tuple(sorted({label for label in labels if label and not _is_int(label)}))


def _label_of(text: str, lookup: dict[str, int], num_classes: int) -> int | None:
    """An integer label is a class id; any other text must be a known class name."""
    if _is_int(text):
        value = int(text)
        return value if 0 <= value < num_classes else None
    return lookup.get(text)


def _build(
    root: Path,
    found: list[tuple[str, str, int]],
    class_names: tuple[str, ...],
    rejects: list[Reject],
    ignored: int,
) -> Source:
    """Sort by key, number the items, and reject duplicate keys."""
    keyed = sorted(
        ((key_of(rel.replace(os.sep, "/")), full, label) for rel, full, label in found),
        key=lambda row: (row[0], row[1]),
    )
    items: list[SourceItem] = []
    previous = None
    for key, full, label in keyed:
        if key == previous:
            rejects.append(Reject(-1, full, f"duplicate key {key!r}: another file has that name"))
            continue
        items.append(SourceItem(len(items), full, key, label))
        previous = key
    return Source(root, items, class_names, rejects, ignored)
