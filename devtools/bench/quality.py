"""Issue 12's quality bound for the DCT-scaled fast paths: `size=` and both crops.

    python -m devtools.bench.quality PHOTO_FOLDER [--count 48] [--sizes 64,112,160,224]

For each JPEG, output size and way ("size" = decode(size=), "rrc", "center"): the mean
absolute distance (levels) of ours and of Pillow's bilinear to a Lanczos resize of the
full decode's same box. The bound: ours' mean at most 1.25x Pillow's mean, ours' worst
image at most 1.25x Pillow's worst + 1 level. tests/reading/test_augment.py checks the same bound
on generated images (fewer, smaller); this measures it on photographs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from packer.source.scan import scan
from readers.augment import Augment, Box, CenterCrop, RandomResizedCrop
from readers.decoding.crop_decode import decode_augmented
from readers.decoding.decode import decode

WAYS = ("size", "rrc", "center")
MEAN_FACTOR, WORST_FACTOR, WORST_SLACK = 1.25, 1.25, 1.0


@dataclass(frozen=True)
class Scores:
    """Per-image distances to the Lanczos reference, ours and Pillow bilinear's."""

    ours: list[float]
    pillow: list[float]

    @property
    def passes(self) -> bool:
        return (float(np.mean(self.ours)) <= MEAN_FACTOR * float(np.mean(self.pillow))
                and max(self.ours) <= WORST_FACTOR * max(self.pillow) + WORST_SLACK)

    def row(self) -> str:
        mean_o, mean_p = float(np.mean(self.ours)), float(np.mean(self.pillow))
        return (f"{mean_o:.2f} | {mean_p:.2f} | {mean_o / mean_p:.2f} | {max(self.ours):.1f}"
                f" | {max(self.pillow):.1f} | {'ok' if self.passes else 'FAIL'}")


def augment_for(way: str, size: int) -> Augment | None:
    """The augment of a way (None: decode(size=), the whole image stretched)."""
    if way == "rrc":
        return RandomResizedCrop(size)
    if way == "center":
        return CenterCrop(size, resize=round(size * 256 / 224))
    return None


def ours_and_box(data: bytes, way: str, size: int, index: int,
                 full_size: tuple[int, int]) -> tuple[torch.Tensor, Box]:
    """Our output (3, H, W) and the box (full-image pixels) it was cut from."""
    augment = augment_for(way, size)
    if augment is None:
        out = decode(data, "rgb8", (size, size))
        assert isinstance(out, torch.Tensor)
        return out, Box(0, 0, full_size[0], full_size[1], False)
    return (decode_augmented(data, augment, (0, 0, index)),
            augment.params(0, 0, index, full_size))


def pillow_box(full: Image.Image, box: Box, size: int,
               resample: Image.Resampling) -> np.ndarray:
    """Pillow's resize of `box` of the full image to size x size, flipped as the box says."""
    edges = (box.left, box.top, box.left + box.width, box.top + box.height)
    out = full.resize((size, size), resample, box=edges)
    if box.flipped:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out, dtype=np.float32)


def score(samples: Sequence[bytes], way: str, size: int) -> Scores:
    """Distances of ours and Pillow bilinear's to Lanczos, one per sample."""
    ours, pillow = [], []
    for index, data in enumerate(samples):
        full_chw = decode(data, "rgb8")
        assert isinstance(full_chw, torch.Tensor)
        full = Image.fromarray(np.ascontiguousarray(full_chw.permute(1, 2, 0).numpy()))
        got, box = ours_and_box(data, way, size, index, (full.height, full.width))
        lanczos = pillow_box(full, box, size, Image.Resampling.LANCZOS)
        bilinear = pillow_box(full, box, size, Image.Resampling.BILINEAR)
        ours.append(float(np.abs(got.permute(1, 2, 0).numpy() - lanczos).mean()))
        pillow.append(float(np.abs(bilinear - lanczos).mean()))
    return Scores(ours, pillow)


def jpeg_samples(folder: Path, count: int) -> list[bytes]:
    """An even spread of `count` JPEGs of the folder."""
    items = [item for item in scan(folder).items
             if item.path.lower().endswith((".jpg", ".jpeg"))]
    step = max(1, len(items) // count)
    return [Path(item.path).read_bytes() for item in items[::step][:count]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=48)
    parser.add_argument("--sizes", default="64,112,160,224")
    args = parser.parse_args(argv)
    samples = jpeg_samples(args.folder, args.count)
    print(f"{len(samples)} photos of {args.folder}; distance to Lanczos (levels)\n")
    print("| way | size | ours mean | Pillow mean | ratio | ours worst | Pillow worst | bound |")
    print("|---|---|---|---|---|---|---|---|")
    failed = False
    for way in WAYS:
        for size in (int(s) for s in args.sizes.split(",")):
            scores = score(samples, way, size)
            failed |= not scores.passes
            print(f"| {way} | {size} | {scores.row()} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
