"""The facts `pack info` shows: a Description, a plain dict with typed keys (also its
--json output)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np

from packer.core.index import Index, open_dataset, shard_json


class FieldFacts(TypedDict):
    """A field's type and the number of samples that have a value for it."""

    type: str
    num_present: int


class _Facts(TypedDict):
    path: str
    format: str
    format_version: int
    num_samples: int
    num_classes: int
    num_shards: int
    num_bytes: int
    image_size: list[int] | None
    encode: dict[str, Any]
    num_rejected: int
    num_ignored: int
    classes: dict[str, int]
    shards: list[dict[str, Any]]


class Description(_Facts, total=False):
    """What `describe` (and `pack info --json`) returns: every key of _Facts always; the
    wds keys `image_types` and `wids_index`, `fields` and COCO's `categories` where the
    dataset has them."""

    image_types: Any
    wids_index: Any
    fields: dict[str, FieldFacts]
    categories: Any


def describe(folder: Path) -> Description:
    """Format, counts per class, shards, sizes, options and rejects of a dataset."""
    index, table = open_dataset(folder)
    counts = np.bincount(np.asarray(table.labels), minlength=len(index.class_names))
    wds = {key: index.extra.get(key) for key in ("image_types", "wids_index")} \
        if index.format == "wds" else {}
    counts_of = index.field_counts or (0,) * len(index.fields)
    fields = {"fields": {spec.name: {"type": spec.type, "num_present": count}
                         for spec, count in zip(index.fields, counts_of, strict=True)}} \
        if index.fields else {}  # samples with a value, per field
    return cast(Description, {  # the order `pack info --json` prints
        "path": str(folder),
        "format": index.format,
        "format_version": index.format_version,
        "num_samples": index.num_samples,
        "num_classes": len(index.class_names),
        "num_shards": len(index.shards),
        "num_bytes": sum(shard.num_bytes for shard in index.shards),
        "image_size": list(index.image_size) if index.image_size else None,
        "encode": applied(index.encode),
        "num_rejected": index.num_rejected,
        "num_ignored": index.num_ignored,
        **wds,
        **fields,
        **({"categories": index.extra["categories"]} if "categories" in index.extra else {}),
        "classes": {name: int(counts[i]) for i, name in enumerate(index.class_names)},
        "shards": [shard_json(shard) for shard in index.shards],
    })


def applied(encode: dict[str, Any]) -> dict[str, Any]:
    """The encode options of index.json that shaped the stored images, and no others.

    index.json keeps every option (the job fingerprint covers them); shown whole, a
    pass-through dataset reads as if it had been cropped and re-encoded at quality 90.
    """
    sized = encode.get("size") is not None
    resized = sized or encode.get("resize") is not None
    reencoded = encode.get("mode") == "reencode" and encode.get("codec") != "png"
    keep = {"mode": True, "check": True, "resize": encode.get("resize") is not None,
            "size": sized, "fit": sized, "upscale": resized,
            "codec": encode.get("codec") is not None, "quality": reencoded}
    return {key: value for key, value in encode.items() if keep.get(key, False)}


def wds_notes(index: Index) -> list[str]:
    """What a wds dataset's users should know: mixed image types, no wids index."""
    if index.format != "wds":
        return []
    notes = []
    types = index.extra.get("image_types") or []
    if len(types) > 1:
        notes.append(f"the shards mix image types ({', '.join(types)}): column-based readers "
                     "(HF datasets, Ray Data) want one; --encode jpeg (or png, lossless) makes "
                     "them uniform")
    skipped = index.extra.get("wids_index_skipped")
    if skipped and index.num_samples:
        notes.append(f"no wids index: {skipped}")
    return notes


def encode_text(encode: dict[str, Any]) -> str:
    """The encode options as `pack info` words: `pass-through`, `resize shorter side 256,
    jpeg q90`, `raw RGB pixels 224x224 (crop)`; then how inputs were checked."""
    shown = applied(encode)
    size = shown.get("size")
    sized = f"size {size[0]}x{size[1]} ({shown.get('fit', 'crop')})" if size else ""
    if shown.get("mode") == "pixels":
        what = f"raw RGB pixels{' ' + sized[5:] if sized else ''}"
    elif shown.get("mode") == "reencode":
        steps = [sized] if sized else []
        if shown.get("resize") is not None:
            steps.append(f"resize shorter side {shown['resize']}"
                         + (" (small images enlarged)" if shown.get("upscale") else ""))
        codec = str(shown.get("codec") or "jpeg")
        steps.append(f"{codec} q{shown['quality']}" if "quality" in shown else codec)
        what = ", ".join(steps)
    else:
        what = "pass-through (the original bytes)"
    return f"{what}; inputs checked: {shown.get('check', 'decode')}"


def image_size_text(facts: Mapping[str, Any]) -> str:
    """`224x224`, or `varies (shorter side 256)` / `varies (as in the source)`."""
    size = facts.get("image_size") or applied(facts.get("encode") or {}).get("size")
    if size:
        return f"{size[0]}x{size[1]}"
    resize = (facts.get("encode") or {}).get("resize")
    return f"varies (shorter side {resize})" if resize else "varies (as in the source)"
