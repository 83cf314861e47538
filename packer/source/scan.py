"""The items of any SRC, as one `Source`: `kind_of` tells what kind of source SRC is, and
the scan of that kind finds the items (with --annotations, the COCO images of a folder or
archive).

Items come back sorted by key, so sample i is the same image in every format made from
the same source. The key is the path relative to the root, without its extension,
`/`-separated. Problems that can be seen without opening a file (unknown class,
duplicate key) become rejects here; unreadable or broken files are found by encode.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from packer.core.fields import FieldValueError
from packer.errors import SourceError
from packer.source.archive import scan_archive
from packer.source.coco import read_coco
from packer.source.coco_images import ArchiveImages, FolderImages, ImageFiles
from packer.source.fields import FieldChoice
from packer.source.folder import read_folder
from packer.source.kinds import Kind, Source, archive_kind, kind_of, root_prefix
from packer.source.manifest import read_manifest
from packer.source.packed import PackedSource, read_rejects
from packer.source.parquet import scan_parquet
from packer.source.wds_labels import LabelChoice
from packer.source.wds_scan import scan_shards


def scan(src: str | Path, fields: FieldChoice | None = None) -> Source:
    """Scan SRC, whatever kind of source it is (`kind_of`); `fields`: which per-sample
    fields to take (default: all)."""
    path = Path(src)
    choice = fields or FieldChoice()
    try:
        if choice.annotations is not None:
            if path.suffix.lower() == ".json" and path.is_file():
                raise SourceError(f"{path}: a COCO .json SRC is its own annotations; drop "
                                  "--annotations, or pass the image folder as SRC")
            return scan_coco(path, choice)
        kind, shards = kind_of(src)
        if kind == "shards":
            return scan_wds(shards, choice)
        if choice.label is not None and kind != "parquet" \
                and not (choice.label == "none" and kind == "folder"):
            raise SourceError(f"{path}: --label {choice.label} applies to webdataset "
                              "shards (a .tar of KEY.jpg + KEY.cls members) and Parquet; an "
                              "image folder takes only --label none; change or drop it")
        if kind is not None:
            return SCANS[kind](path, choice)
    except FieldValueError as exc:  # a --fields or --field that the source cannot meet
        raise SourceError(str(exc)) from exc
    if path.exists():
        raise SourceError(f"{path}: not a folder, .csv or .jsonl manifest, COCO .json, .tar "
                          "or .zip archive, webdataset shards or Parquet file; pass one of "
                          "those")
    raise SourceError(f"{path}: no such file or folder; check the source path")


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
    return read_coco(root, images, Path(str(choice.annotations)), choice)


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


def scan_packed(folder: Path, choice: FieldChoice) -> Source:
    """The samples of a packed dataset, in its order, with its keys, labels, classes and
    the fields chosen of its own."""
    origin = PackedSource(folder)
    index = origin.index
    # --field retypes a packed source's fields too (json boxes -> floats): the values are
    # decoded with the source's types and encoded with the new ones (PackedSource)
    fields = choice.chosen(choice.retyped(index.fields, str(folder)), str(folder))
    origin.fields = fields
    return Source(folder, origin.items(root_prefix(folder)), index.class_names, [],
                  index.num_ignored, origin, read_rejects(folder), fields=fields)


def scan_wds(shards: list[Path], choice: FieldChoice) -> Source:
    """WebDataset shards: samples grouped by key, labels and fields from their members
    (`scan_shards`)."""
    try:
        label = LabelChoice.parse(choice.label)
    except ValueError as exc:
        raise SourceError(str(exc)) from exc
    return scan_shards(shards, choice, label)


SCANS: dict[Kind, Callable[[Path, FieldChoice], Source]] = {
    "parquet": scan_parquet, "archive": scan_archive, "manifest": read_manifest,
    "coco": scan_coco_manifest, "packed": scan_packed, "folder": read_folder,
}
