"""Scan an image folder described by a COCO-style annotations file (instances_*.json).

    image           one sample per entry of `images`, its file `file_name` relative to
                    the image folder, its key that path without the extension
    fields          per image, from the annotations naming its id, in annotation order:
                    boxes (floats: float32 (n, 4), [x, y, w, h] rows), category_ids,
                    annotation_ids, iscrowd (ints: int64 (n,)) and, when any
                    annotation has one, segmentation (json: its polygons or RLE);
                    an image without annotations has boxes of shape (0, 4), empty
                    ids and an empty segmentation list; `--field boxes:json` (or
                    any base field's name) keeps it as json lists; `pack verify
                    --source` rescans with the types the dataset was packed with
    categories      {id: name} in index.json's `extra["categories"]` (pack info shows it)
    label           0 for every image: one class named after the image folder

The JSON is parsed once; the annotations are then grouped by image with numpy (their
ids, image ids, categories, iscrowd and boxes as arrays), each image's fields encoded
into its fields record, and the parsed objects dropped, so what the scan keeps is one
byte record per image. An annotation naming an image id that `images` lacks, and an
image entry whose file does not exist, are rejects naming the id. An annotation whose
`bbox` is missing or not 4 numbers (width, height >= 0), whose `category_id` is missing,
not an integer or not among `categories`, or whose `iscrowd` is not 0 or 1 (absent
means 0, as in COCO) makes its image a reject naming the annotation id and the file:
nothing is filled in, and the image is not packed with some of its boxes missing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from packer.core.field_arrays import FLOAT32_MAX
from packer.core.fields import FieldSpec, encode_value, pack_record
from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.coco_images import ImageFiles, _Missing
from packer.source.fields import FieldChoice
from packer.source.items import ItemsBuilder
from packer.source.kinds import Source
from packer.source.manifest import key_of
from packer.storage.files import sha256_file

# Arrays, not JSON text: what a detection model takes, and read without parsing text
# (array fields); only the segmentation's polygons and RLE need JSON.
BASE_FIELDS = (FieldSpec("boxes", "floats"), FieldSpec("category_ids", "ints"),
               FieldSpec("annotation_ids", "ints"), FieldSpec("iscrowd", "ints"))
SEGMENTATION = FieldSpec("segmentation", "json")
CATEGORIES_KEY = "categories"  # in index.json's `extra`
ANNOTATIONS_KEY = "annotations"  # in index.json's `extra`: the file's name and sha256


def read_coco(root: Path, images_in: ImageFiles, annotations: Path, choice: FieldChoice
              ) -> Source:
    """The images that `annotations` lists, found in a folder or an archive
    (`images_in`), with their annotations as fields."""
    data = _load(annotations)
    images = _section(data, "images", annotations)
    anns = _section(data, "annotations", annotations, required=False)
    categories = _categories(_section(data, "categories", annotations, required=False),
                             annotations)
    del data
    has_segmentation = any(isinstance(a, dict) and "segmentation" in a for a in anns)
    found = [_typed(spec, choice) for spec in BASE_FIELDS] + \
        ([SEGMENTATION] if has_segmentation else [])
    specs = choice.chosen(found, str(annotations))
    image_ids = [_image_id(entry, n, annotations) for n, entry in enumerate(images)]
    rejects: list[Reject] = []
    groups, bad = _group(anns, image_ids, categories, annotations, rejects)
    segmentations = [a.get("segmentation") for a in anns] if has_segmentation else []
    del anns
    builder = ItemsBuilder(images_in.prefix)
    for n, entry in enumerate(images):
        image_id, name = image_ids[n], str(entry["file_name"])
        try:
            if image_id in bad:
                raise _Missing(bad[image_id])
            rel, tail = images_in.locate(name)
        except _Missing as exc:
            rejects.append(Reject(-1, images_in.path_of(name), f"image id {image_id} in "
                                                               f"{annotations}: {exc}"))
            continue
        values = _values(groups.get(image_id), segmentations)
        record = pack_record([encode_value(spec.type, _as_json(values[spec.name])
                                           if spec.type == "json" else values[spec.name])
                              for spec in specs]) if specs else b""
        builder.add(key_of(rel), tail, 0, record)
    items, archive = images_in.finish(builder.build(rejects), builder.order)
    extra = {CATEGORIES_KEY: categories,
             ANNOTATIONS_KEY: {"file": annotations.name, "sha256": sha256_file(annotations)}}
    return Source(root, items, (images_in.class_name(),), rejects, archive=archive,
                  fields=specs, extra=extra)


def _load(annotations: Path) -> Any:
    try:
        with open(annotations, "rb") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{annotations}: not valid JSON ({exc.msg} at line {exc.lineno}, "
                          f"column {exc.colno}); fix the file or pass the right "
                          "--annotations") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{annotations}: cannot read the annotations file ({exc}); "
                          "check the --annotations path") from exc


def _section(data: Any, name: str, annotations: Path, required: bool = True) -> list[Any]:
    if not isinstance(data, dict):
        raise SourceError(f"{annotations}: a COCO annotations file is a JSON object with "
                          "`images` (and `annotations`, `categories`); fix the file")
    value = data.get(name, None if required else [])
    if not isinstance(value, list):
        raise SourceError(f"{annotations}: `{name}` must be a list; fix the file")
    return value


def _categories(entries: list[Any], annotations: Path) -> dict[str, str]:
    """{str(id): name}: JSON object keys are strings."""
    out: dict[str, str] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise SourceError(f"{annotations}: category {str(entry)[:60]} needs an integer "
                              "`id` and a `name`; fix the file")
        out[str(entry["id"])] = str(entry.get("name", entry["id"]))
    return out


def _image_id(entry: Any, n: int, annotations: Path) -> int:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), int) \
            or not isinstance(entry.get("file_name"), str):
        raise SourceError(f"{annotations}: images[{n}] needs an integer `id` and a "
                          "`file_name`; fix the file")
    return int(entry["id"])


class _Group:
    """The annotations of one image: rows of the arrays below, in annotation order."""

    __slots__ = ("boxes", "categories", "crowd", "ids", "rows")

    def __init__(self, rows: npt.NDArray[np.intp], ids: npt.NDArray[np.int64],
                 categories: npt.NDArray[np.int64], crowd: npt.NDArray[np.int64],
                 boxes: npt.NDArray[np.float64]) -> None:
        self.rows, self.ids, self.categories, self.crowd, self.boxes = \
            rows, ids, categories, crowd, boxes


def _group(anns: list[Any], image_ids: Sequence[int], categories: dict[str, str],
           annotations: Path, rejects: list[Reject]) -> tuple[dict[int, _Group], dict[int, str]]:
    """{image id: its annotations}, from arrays, and {image id: why one of its annotations
    is bad}; an unknown image id is a reject here, a bad annotation its image's reject."""
    count = len(anns)
    ids = np.zeros(count, np.int64)
    owners = np.zeros(count, np.int64)
    cats = np.zeros(count, np.int64)
    crowd = np.zeros(count, np.int64)
    boxes = np.zeros((count, 4), np.float64)
    good = np.ones(count, np.bool_)
    problems: dict[int, list[str]] = {}
    for n, ann in enumerate(anns):
        ids[n], owners[n] = _identified(ann, n, annotations)
        problem = _problem(ann, categories)
        if problem is None:
            cats[n], crowd[n], boxes[n] = ann["category_id"], ann.get("iscrowd", 0), ann["bbox"]
        else:
            good[n] = False
            problems.setdefault(int(owners[n]), []).append(f"annotation {int(ids[n])} "
                                                           f"{problem}")
    known = np.isin(owners, np.asarray(image_ids, np.int64))
    for n in np.flatnonzero(~known).tolist():
        rejects.append(Reject(-1, str(annotations),
                              f"annotation {int(ids[n])} names image id {int(owners[n])}, "
                              "which `images` does not list; fix the annotations file"))
    order = np.flatnonzero(known & good)
    order = order[np.argsort(owners[order], kind="stable")]
    edges = np.flatnonzero(np.diff(owners[order])) + 1
    groups: dict[int, _Group] = {}
    for rows in np.split(order, edges) if len(order) else []:
        groups[int(owners[rows[0]])] = _Group(rows, ids[rows], cats[rows], crowd[rows],
                                              boxes[rows])
    return groups, {owner: _bad_reason(found) for owner, found in problems.items()}


def _identified(ann: Any, n: int, annotations: Path) -> tuple[int, int]:
    """An annotation's id and image id: without them it cannot be named or placed."""
    if not isinstance(ann, dict) or not _is_int(ann.get("id")) \
            or not _is_int(ann.get("image_id")):
        raise SourceError(f"{annotations}: annotations[{n}] needs an integer `id` and "
                          "`image_id`; fix the file")
    return int(ann["id"]), int(ann["image_id"])


def _problem(ann: dict[str, Any], categories: dict[str, str]) -> str | None:
    """What is wrong with an annotation's bbox, category_id or iscrowd (None: nothing).

    Nothing is filled in: a box or category made up would be wrong data in the dataset."""
    bbox = ann.get("bbox")
    if "bbox" not in ann:
        return "has no `bbox`"
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(map(_is_number, bbox)):
        return f"has `bbox` {_shown(bbox)}, not 4 numbers [x, y, width, height]"
    if not all(map(_finite, bbox)) or bbox[2] < 0 or bbox[3] < 0:
        return f"has `bbox` {_shown(bbox)}: x, y must be finite, width and height >= 0"
    if max(abs(float(n)) for n in bbox) > FLOAT32_MAX:
        return f"has `bbox` {_shown(bbox)}: beyond float32's range, as boxes are stored"
    category = ann.get("category_id")
    if "category_id" not in ann:
        return "has no `category_id`"
    if not _is_int(category):
        return f"has `category_id` {_shown(category)}, not an integer (64-bit)"
    if categories and str(category) not in categories:
        return f"has `category_id` {category}, which `categories` does not list"
    if ann.get("iscrowd", 0) not in (0, 1) or isinstance(ann.get("iscrowd"), bool):
        return f"has `iscrowd` {_shown(ann.get('iscrowd'))}, not 0 or 1"
    return None


def _bad_reason(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more bad annotations)" if len(problems) > 1 else ""
    return (f"{problems[0]}{more}; fix or delete the annotation, the image is not packed "
            "without it")


def _is_int(value: Any) -> bool:
    """An int that the id columns (int64) hold."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63




def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _typed(spec: FieldSpec, choice: FieldChoice) -> FieldSpec:
    """A base field as an array, or as json where `choice` says so: a dataset packed
    with json base fields holds json lists, and `pack verify --source` rescans the
    annotations with the dataset's own types."""
    return FieldSpec(spec.name, "json") if choice.type_of(spec.name, spec.type) == "json" \
        else spec


def _as_json(value: Any) -> Any:
    """The lists that json fields hold (float boxes, int ids, [] for none)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _values(group: _Group | None, segmentations: list[Any]) -> dict[str, Any]:
    if group is None:
        none = np.zeros(0, np.int64)
        return {"boxes": np.zeros((0, 4), np.float64), "category_ids": none,
                "annotation_ids": none, "iscrowd": none, "segmentation": []}
    return {"boxes": group.boxes, "category_ids": group.categories,
            "annotation_ids": group.ids, "iscrowd": group.crowd,
            "segmentation": [segmentations[row] for row in group.rows.tolist()]
            if segmentations else []}
