"""What the tests of the column path of fields share: a bit-exact comparison, and a
dataset whose boxes take the fast path (plain numbers within float32's range)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packer import ConvertOptions, convert
from packer.encode import EncodeOptions
from tests.helpers import png_bytes, random_image


def same_bits(got: Any, want: Any) -> bool:
    """Equal bit for bit: tensors by dtype, shape and bytes, containers recursively."""
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == want.dtype \
            and got.shape == want.shape \
            and got.contiguous().numpy().tobytes() == want.contiguous().numpy().tobytes()
    if isinstance(want, dict):
        return isinstance(got, dict) and list(got) == list(want) \
            and all(same_bits(got[key], want[key]) for key in want)
    if isinstance(want, list | tuple):
        return type(got) is type(want) and len(got) == len(want) \
            and all(same_bits(a, b) for a, b in zip(got, want, strict=True))
    if isinstance(want, float):
        return isinstance(got, float) and np.float64(got).tobytes() == np.float64(want).tobytes()
    return type(got) is type(want) and got == want



def pack_plain_boxes(root: Path, fmt: str, count: int) -> Path:
    """`count` samples with a caption, boxes of 0 to 5 rows (a few all integers) and a
    JSON object (`meta`, which takes the per-sample path), packed as fmt (npy at 8x8)."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(count):
        name = f"img{i:04d}.png"
        (root / name).write_bytes(png_bytes(random_image(8, 8, seed=i)))
        boxes = [[k, 2, 3, 4] if i % 7 == 0 else [i + 0.1 * k, 1 / 3, 0.5, 2.5e-30]
                 for k in range(i % 6)]
        lines.append(json.dumps({"path": name, "label": i % 3, "caption": f"photo {i} é",
                                 "boxes": boxes, "meta": {"i": i}}))
    (root / "list.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    encode = EncodeOptions(size=(8, 8)) if fmt == "npy" else EncodeOptions()
    convert(root / "list.jsonl", root / fmt, fmt, encode, ConvertOptions(workers=0))
    return root / fmt
