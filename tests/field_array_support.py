"""What the tests of array fields (`floats`, `ints`) share: a manifest of boxes and ids
with what a reader must give for them, its packing, and a bit-exact comparison."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packer import ConvertOptions, EncodeOptions, FieldChoice, FieldSpec, convert, formats
from packer.core.index import open_dataset
from tests.helpers import png_bytes, random_image

ARRAY_FIELDS = FieldChoice(types=(FieldSpec("boxes", "floats"), FieldSpec("ids", "ints")))
DTYPES = {"floats": np.float32, "ints": np.int64}
NAMES = ("boxes", "ids")
Expected = dict[str, dict[str, Any]]


def array_rows(count: int = 12) -> list[dict[str, Any]]:
    """JSONL fields of `count` images: 0 to 50 boxes (float32 rounding, subnormals, inf,
    NaN, -0.0) and as many ids (int64's ends), `[]`, null and a missing key."""
    rows: list[dict[str, Any]] = []
    for i in range(count):
        n = (i * 7) % 51  # distinct counts: a batch of two or more is always ragged
        rows.append({"boxes": [[i + 0.1 * k, 1 / 3, 1e-40 * k, -2.5] for k in range(n)],
                     "ids": [k * 10**17 - i for k in range(n)]})
    rows[0] = {"boxes": [], "ids": []}
    rows[1]["boxes"] = None  # null: no value
    del rows[5]["ids"]  # missing key: no value
    rows[2]["boxes"][0] = [math.inf, math.nan, -0.0, 3.4e38]
    rows[2]["ids"][:2] = [-(2**63), 2**63 - 1]
    rows[-1] = {"boxes": [[k, k + 0.5, 1e-7 * k, 3.0] for k in range(50)], "ids": list(range(50))}
    return rows


def array_manifest(root: Path, count: int = 12) -> tuple[Path, Expected]:
    """A JSONL manifest of small PNGs with array_rows(); returns it and, by key, what a
    reader must give: np.array of the source as float32 / int64, None for no value."""
    root.mkdir(parents=True, exist_ok=True)
    lines, expected = [], {}
    for i, row in enumerate(array_rows(count)):
        (root / f"img{i:03d}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
        lines.append(json.dumps({"path": f"img{i:03d}.png", "label": i % 2, **row}))
        expected[f"img{i:03d}"] = {name: None if row.get(name) is None
                                   else np.array(row[name], DTYPES[kind])
                                   for name, kind in (("boxes", "floats"), ("ids", "ints"))}
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return manifest, expected


def pack_arrays(root: Path, fmt: str, source: Path | None = None,
                fields: FieldChoice = ARRAY_FIELDS) -> Path:
    """`source` (default: a fresh array_manifest under root/src) packed as root/<fmt>."""
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else EncodeOptions()
    convert(source or array_manifest(root / "src")[0], root / fmt, fmt, encode,
            ConvertOptions(workers=0, fields=fields))
    return root / fmt


def pack_every_format(root: Path) -> tuple[dict[str, Path], Expected]:
    """One array_manifest packed in every format under root; the folders, and what a
    reader must give by key."""
    manifest, expected = array_manifest(root / "src")
    return {fmt: pack_arrays(root, fmt, manifest) for fmt in formats.FORMATS}, expected


def same_array(got: Any, want: np.ndarray | None) -> bool:
    """Same dtype, shape and bytes (NaN and -0.0 included); None for None."""
    if want is None or got is None:
        return got is None and want is None
    if isinstance(got, torch.Tensor):
        got = got.numpy()
    return isinstance(got, np.ndarray) and got.dtype == want.dtype \
        and got.shape == want.shape and got.tobytes() == want.tobytes()


def stored_values(folder: Path) -> dict[str, list[bytes | None]]:
    """Each sample's field values in byte form, as the format's reader checks them."""
    index, table = open_dataset(folder)
    reader = formats.load(index.format).open_reader(folder, index, table)
    try:
        values = reader.field_values_many(range(len(table)))
        return {table.key(i): [None if v is None else bytes(v) for v in row]
                for i, row in enumerate(values)}
    finally:
        reader.close()
