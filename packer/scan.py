"""Find the input images: an image folder (class sub-folders) or a CSV/JSONL manifest.

Items come back sorted by key, so sample i is the same image in every format made from
the same source. The key is the path relative to the root, without its extension,
`/`-separated. Problems that can be seen without opening a file (unknown class,
duplicate key) become rejects here; unreadable or broken files are found by encode.
"""

from __future__ import annotations

import csv
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
        if entry.is_dir(follow_symlinks=True) and not entry.name.startswith(".")
    )
    ignored = sum(1 for entry in os.scandir(root) if entry.name not in classes)
    found: list[tuple[str, str, int]] = []
    for label, name in enumerate(classes):
        files, skipped = _walk_images(root / name)
        ignored += skipped
        found.extend((os.path.join(name, rel), str(root / name / rel), label) for rel in files)
    if not classes:
        raise SourceError(
            f"{root}: no class sub-folders found; lay images out as SRC/<class>/<image> "
            "or pass a .csv/.jsonl manifest"
        )
    return _build(root, found, tuple(classes), [], ignored)


def _walk_images(folder: Path) -> tuple[list[str], int]:
    """Relative paths of image files below `folder` and the number of ignored entries.

    Symlinked folders are not followed, so a symlink loop cannot trap the scan.
    """
    files: list[str] = []
    ignored = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        hidden = [d for d in dirnames if d.startswith(".")]
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        ignored += len(set(hidden) | set(links))
        dirnames[:] = sorted(d for d in dirnames if d not in hidden and d not in links)
        for filename in filenames:
            if filename.startswith(".") or Path(filename).suffix.lower() not in IMAGE_EXTENSIONS:
                ignored += 1
                continue
            files.append(os.path.relpath(os.path.join(dirpath, filename), folder))
    return files, ignored


def scan_manifest(manifest: Path) -> Source:
    """Scan a manifest of `path,label` rows; labels are class names or integers."""
    rows = list(_read_manifest_rows(manifest))
    root = manifest.parent
    class_names = _class_names([label for _, label in rows])
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
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or not {"path", "label"} <= set(reader.fieldnames):
            raise SourceError(f"{manifest}: the header row must name `path` and `label` columns")
        for row in reader:
            yield str(row["path"]).strip(), str(row["label"]).strip()
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            yield str(obj["path"]), str(obj["label"])
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


def _class_names(labels: list[str]) -> tuple[str, ...]:
    """Named labels: the sorted names. All-integer labels: "0" .. str(max)."""
    if labels and all(_is_int(label) for label in labels):
        top = max(int(label) for label in labels)
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
