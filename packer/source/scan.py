"""Find the inputs: an image folder (class sub-folders), a CSV/JSONL manifest, an archive
(.tar, tar of tars, .zip), webdataset shards, Parquet files with image bytes, a packed
dataset (a folder with index.json: format to format), or COCO images (a folder or
archive with --annotations, or the .json as the manifest).

Items come back sorted by key, so sample i is the same image in every format made from
the same source. The key is the path relative to the root, without its extension,
`/`-separated. Problems that can be seen without opening a file (unknown class,
duplicate key) become rejects here; unreadable or broken files are found by encode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packer.core.fields import FieldSpec, FieldValueError
from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.archive import archive_kind, scan_archive
from packer.source.coco import read_coco
from packer.source.coco_images import ArchiveImages, FolderImages, ImageFiles
from packer.source.empty import no_class_folders, no_images
from packer.source.fields import (
    SIDECARS,
    FieldChoice,
    repacked,
    sidecar_record,
)
from packer.source.items import ItemsBuilder, SourceItems
from packer.source.manifest import key_of as key_of
from packer.source.manifest import read_manifest
from packer.source.members import ArchiveSource
from packer.source.names import image_name
from packer.source.packed import PackedSource, is_packed, read_rejects
from packer.source.parquet import is_parquet_source, scan_parquet
from packer.source.parquet_read import ParquetSource
from packer.source.shardset import ShardSet
from packer.source.wds_labels import UNLABELLED, LabelChoice
from packer.source.wds_paths import brace_shards, folder_shards, has_braces, looks_like_wds
from packer.source.wds_scan import scan_shards

MANIFEST_SUFFIXES = (".csv", ".jsonl")
NO_SIDECARS = sidecar_record("", set())  # the fields record of an image without sidecars


@dataclass(frozen=True)
class Source:
    """What a scan found: items to encode, class names, early rejects, ignored files.

    `archive` is set when SRC's items are read in place: the members of a .tar or .zip (read
    as the extracted files would be), webdataset shards or Parquet files. `origin` is set
    when SRC is a packed dataset: its items are that dataset's samples, in its order, and
    `origin` reads their bytes; `inherited` are the rejects of the conversion that made it
    (they carry over, so the lineage to the images stays whole).
    """

    root: Path
    items: SourceItems
    class_names: tuple[str, ...]
    rejects: list[Reject]
    num_ignored: int
    origin: PackedSource | None = None
    inherited: list[Reject] = field(default_factory=list)
    # SRC is an archive (or webdataset shards, or Parquet files): reads its items in place
    archive: ArchiveSource | ShardSet | ParquetSource | None = None
    fields: tuple[FieldSpec, ...] = ()  # per-sample fields (`FieldChoice` chose them)
    extra: dict[str, Any] = field(default_factory=dict)  # for index.json's extra (COCO)


def scan(src: str | Path, fields: FieldChoice | None = None) -> Source:
    """Scan an image folder, a manifest file, an archive (.tar, .zip) or a packed dataset.

    `fields`: which per-sample fields to take (default: all)."""
    path = Path(src)
    choice = fields or FieldChoice()
    try:
        if choice.annotations is not None:
            if path.suffix.lower() == ".json" and path.is_file():
                raise SourceError(f"{path}: a COCO .json SRC is its own annotations; drop "
                                  "--annotations, or pass the image folder as SRC")
            return scan_coco(path, choice)
        shards = wds_shards(src)
        if shards is not None:
            return scan_wds(shards, choice)
        if is_parquet_source(path):  # Parquet with image bytes
            tabled = scan_parquet(path, choice)
            return Source(path, tabled.items, tabled.class_names, tabled.rejects, 0,
                          archive=tabled.origin, fields=tabled.fields)
        if choice.label is not None and not (choice.label == "none" and path.is_dir()
                                             and not is_packed(path)):
            raise SourceError(f"{path}: --label {choice.label} applies to webdataset "
                              "shards (a .tar of KEY.jpg + KEY.cls members) and Parquet; an "
                              "image folder takes only --label none; change or drop it")
        if path.is_file() and archive_kind(path) is not None:
            archived = scan_archive(path, choice)
            return Source(path, archived.items, archived.class_names, archived.rejects,
                          archived.num_ignored, archive=archived.reader,
                          fields=archived.fields)
        if path.is_file() and path.suffix.lower() in MANIFEST_SUFFIXES:
            return scan_manifest(path, choice)
        if path.is_file() and path.suffix.lower() == ".json":
            return scan_coco_manifest(path, choice)
        if is_packed(path):
            return scan_packed(path, choice)
        if path.is_dir():
            return scan_folder(path, choice)
    except FieldValueError as exc:  # a --fields or --field that the source cannot meet
        raise SourceError(str(exc)) from exc
    if path.exists():
        raise SourceError(f"{path}: not a folder, .csv or .jsonl manifest, COCO .json, .tar "
                          "or .zip archive, webdataset shards or Parquet file; pass one of "
                          "those")
    raise SourceError(f"{path}: no such file or folder; check the source path")


def wds_shards(src: str | Path) -> list[Path] | None:
    """The shards SRC names when it is webdataset shards: a brace list, a .tar/.tgz of
    samples, a folder of shards that is not a packed dataset."""
    path = Path(src)
    if has_braces(str(src)):
        return brace_shards(str(src))
    if path.is_file() and archive_kind(path) is not None:
        return [path] if looks_like_wds(path) else None
    if path.is_dir() and not is_packed(path):
        return folder_shards(path)
    return None


def scan_wds(shards: list[Path], choice: FieldChoice) -> Source:
    """WebDataset shards: samples grouped by key, labels and fields from their members
    (`scan_shards`)."""
    try:
        label = LabelChoice.parse(choice.label)
    except ValueError as exc:
        raise SourceError(str(exc)) from exc
    found = scan_shards(shards, choice, label)
    root = shards[0] if len(shards) == 1 else shards[0].parent
    return Source(root, found.items, found.class_names, found.rejects, found.num_ignored,
                  archive=found.reader, fields=found.fields)


def scan_coco(root: Path, choice: FieldChoice) -> Source:
    """An image folder or archive whose images a COCO file lists (`read_coco`)."""
    images: ImageFiles
    if root.is_file() and archive_kind(root) is not None:
        images = ArchiveImages(root)
    elif root.is_dir():
        images = FolderImages(root)
    else:
        raise SourceError(f"{root}: --annotations needs SRC to be the folder (or archive) of "
                          "the images its `file_name`s are relative to")
    found = read_coco(images, Path(str(choice.annotations)), choice)
    return Source(root, found.items, found.class_names, found.rejects, 0,
                  archive=found.archive, fields=found.fields, extra=found.extra)


def scan_coco_manifest(annotations: Path, choice: FieldChoice) -> Source:
    """A COCO annotations file as the manifest: its `file_name`s are relative to its
    folder, as a manifest's paths are (an export that keeps the JSON beside the images)."""
    source = scan_coco(annotations.parent, replace(choice, annotations=str(annotations)))
    if not len(source.items) and source.rejects \
            and not any(os.path.exists(reject.path) for reject in source.rejects):
        raise SourceError(f"{annotations}: none of its images is in {annotations.parent} "
                          "(file_names are relative to the JSON's folder); pass the image "
                          f"folder as SRC with --annotations {annotations}")
    return source


def scan_packed(folder: Path, choice: FieldChoice | None = None) -> Source:
    """The samples of a packed dataset, in its order, with its keys, labels, classes and
    the fields chosen of its own."""
    origin = PackedSource(folder)
    index = origin.index
    choice = choice or FieldChoice()
    # --field retypes a packed source's fields too (json boxes -> floats): the values are
    # decoded with the source's types and encoded with the new ones (PackedSource)
    fields = choice.chosen(choice.retyped(index.fields, str(folder)), str(folder))
    origin.fields = fields
    return Source(folder, origin.items(root_prefix(folder)), index.class_names, [],
                  index.num_ignored, origin, read_rejects(folder), fields=fields)


def root_prefix(root: Path) -> str:
    """What joins the root to a relative path, spelled as pathlib's `root / rel` spells it."""
    text = str(root)
    return "" if text == "." else os.path.join(text, "")


def scan_folder(root: Path, choice: FieldChoice | None = None) -> Source:
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
        if not _is_utf8(name):
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
    return Source(root, found.build(rejects), tuple(classes), rejects, ignored,
                  fields=fields)


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
        sidecars = _sidecars(entries, seen)
        for entry in entries:
            rel = rel_dir + os.sep + entry.name if rel_dir else entry.name
            kind = _kind(entry)
            if kind == "folder":
                pending.append(rel)
            elif kind == "linked folder" or not image_name(entry.name):
                ignored += entry.name not in sidecars.get("", ())
            elif kind != "file":
                rejects.append(_unusable(prefix, rel, kind))
            else:
                _add_image(prefix, rel, label, found, rejects, sidecars)
    return ignored


def _sidecars(entries: list[os.DirEntry[str]], seen: set[str] | None) -> dict[str, set[str]]:
    """{image stem: sidecar suffixes beside it} of one folder, and "" -> the names used."""
    if seen is None:
        return {}
    images = {entry.name[: entry.name.rfind(".")] for entry in entries
              if image_name(entry.name) and "." in entry.name}
    found: dict[str, set[str]] = {"": set()}
    for entry in entries:
        stem, dot, ext = entry.name.rpartition(".")
        suffix = dot + ext.lower()
        if dot and suffix in SIDECARS and stem in images and _kind(entry) == "file":
            found.setdefault(stem, set()).add(suffix)
            found[""].add(entry.name)
            seen.add(suffix)
    return found


def _add_image(prefix: str, rel: str, label: int, found: ItemsBuilder,
               rejects: list[Reject], sidecars: dict[str, set[str]]) -> None:
    """Add an image file (with its sidecar fields when the scan takes them)."""
    record = b""
    if sidecars:
        base = rel[rel.rfind(os.sep) + 1 :]
        beside = sidecars.get(base[: base.rfind(".")])
        try:
            record = sidecar_record(prefix + rel, beside) if beside else NO_SIDECARS
        except FieldValueError as exc:
            rejects.append(Reject(-1, prefix + rel, f"bad field: {exc}"))
            return
    if not _add_file(found, rel, label, record):
        rejects.append(_unusable(prefix, rel, "file"))


def _unusable(prefix: str, rel: str, kind: str) -> Reject:
    """Why an image name cannot be packed: an undecodable name, or not a regular file."""
    if not _is_utf8(rel):
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


def scan_manifest(manifest: Path, choice: FieldChoice | None = None) -> Source:
    """Scan a CSV/JSONL manifest (`read_manifest`)."""
    items, class_names, rejects, fields = read_manifest(manifest, choice or FieldChoice())
    return Source(manifest.parent, items, class_names, rejects, 0, fields=fields)
