"""Benchmark cases for per-sample fields: a dict sample with a caption and boxes against
the plain (image, label) sample, same images, same loader, side by side.

The photo folder becomes a JSONL manifest (every image with a caption of ~40 characters
and 0 to 7 boxes), packed in every format with `--field boxes:floats` (JPEG decoded at
train time; npy stored pixels).
Targets (issue 13): at most 15% slower than image + label in rgb8, 30% in raw mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packer.core.fields import FieldSpec
from packer.source.scan import scan

FIELD_FORMATS = ("wds", "lmdb", "hdf5", "npy")
FIELDS = ("caption", "boxes")
# Boxes as an array field (float32, read without parsing text), as a detection dataset
# packs them; a copy packed before with json boxes is packed again.
FIELD_TYPES = (FieldSpec("boxes", "floats"),)
TARGETS = {"rgb8": 1 / 1.15, "raw": 1 / 1.30}  # fields rate / plain rate, at least


def field_manifest(src: Path, manifest: Path) -> Path:
    """A JSONL manifest of src's images with a caption and boxes each (written once)."""
    if manifest.exists():
        return manifest
    manifest.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, item in enumerate(scan(src).items):
        boxes = [[0.1 * k, 0.2, 0.5 + 0.01 * k, 0.75] for k in range(n % 8)]
        lines.append(json.dumps({"path": str(Path(item.path).resolve()), "label": item.label,
                                 "caption": f"a photograph, number {n}, of class {item.label}",
                                 "boxes": boxes}))
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest


def field_copy(packed: Path) -> Path:
    """Where the copy with fields of a packed format lives, beside it."""
    return packed.parent / f"{packed.name}-fields"


def field_cases(case: Callable[..., Any], packed: dict[str, Path],
                size: tuple[int, int], decodes: tuple[str, ...] = ("rgb8", "raw"),
                formats: tuple[str, ...] = FIELD_FORMATS,
                target: float | None = None) -> list[Any]:
    """`case` builds a read.Case; the plain samples, those with fields read per batch and
    with them held in memory (readers.held_fields), through PackedDataset + readers.collate.
    `target` replaces the per-decode TARGETS (fields rate / plain rate, at least)."""
    from readers import PackedDataset, collate

    cases = []
    for fmt in (f for f in formats if f in packed and field_copy(packed[f]).exists()):
        path = field_copy(packed[fmt])
        resize = size if fmt != "npy" else None
        for decode in decodes:
            shown = f"{decode} {size[0]}x{size[1]}"
            options: dict[str, Any] = {"decode": decode, "size": None if decode == "raw"
                                       else resize}
            plain = f"{fmt}-plain-{decode}"
            cases.append(case(plain, "image + label", fmt, shown,
                              lambda o=options, p=path: PackedDataset(p, **o), shuffle=True,
                              collate=collate))
            cases.append(case(f"{fmt}-fields-{decode}", "dict + caption + boxes", fmt, shown,
                              lambda o=options, p=path: PackedDataset(p, fields=FIELDS, **o),
                              shuffle=True, collate=collate,
                              targets=((plain, target or TARGETS[decode]),)))
            cases.append(case(f"{fmt}-held-{decode}", "dict + caption + boxes, fields in memory",
                              fmt, shown,
                              lambda o=options, p=path: PackedDataset(p, fields=FIELDS,
                                                                      fields_in_memory=True, **o),
                              shuffle=True, collate=collate,
                              targets=((plain, target or TARGETS[decode]),)))
    return cases
