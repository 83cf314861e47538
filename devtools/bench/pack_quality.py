"""Pack-time resizing against the best resize: `--size HxW` (npy, crop) and `--resize N`.

    python -m devtools.bench.pack_quality PHOTO_FOLDER [--count 254] [--size 224] [--resize 256]

For each JPEG: the mean absolute distance (levels) of what `pack convert` stores (before
any re-encode) and of Pillow's bilinear resize of the full decode, each to a Lanczos
resize of the full decode at the same output size; and how many outputs differ in size
from `round(side * scale)` of the original image. The bound (issue 35): ours' mean at
most 1.1x Pillow bilinear's, and every output the size the original image gives.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from packer.core.record import Record, SourceItem
from packer.encode import EncodeOptions, encode_item
from packer.source.scan import scan

BOUND = 1.1
Resample = Image.Resampling


def full_decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    return (ImageOps.exif_transpose(image) or image).convert("RGB")


def size_reference(image: Image.Image, size: int, resample: Resample) -> np.ndarray:
    """The centre crop of the proportions of `size` x `size`, resized to it."""
    width, height = image.size
    side = min(width, height)
    box = ((width - side) / 2, (height - side) / 2, (width + side) / 2, (height + side) / 2)
    return np.asarray(image.resize((size, size), resample, box=box), np.float64)


def resize_reference(image: Image.Image, shorter: int, resample: Resample) -> np.ndarray:
    width, height = image.size
    scale = shorter / min(width, height)
    if scale >= 1.0:  # never enlarged (no --upscale)
        return np.asarray(image, np.float64)
    out = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(image.resize(out, resample), np.float64)


class Memory:
    """An origin whose item is bytes in memory (encode_item reads it as an archive member)."""

    whole_files = True
    pixel_size = None

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, item: SourceItem) -> bytes:
        return self.data


def ours(data: bytes, options: EncodeOptions) -> np.ndarray:
    """What the conversion stores, decoded: raw pixels for npy, the resized image before
    any lossy encode for --resize (the caller asks for PNG)."""
    record = encode_item(SourceItem(0, "x.jpg", "x", 0, Memory(data)), options)
    if not isinstance(record, Record):
        raise ValueError(f"rejected: {record.reason}")
    if options.pixels:
        size = options.size or (0, 0)
        return np.frombuffer(record.data, np.uint8).reshape(*size, 3).astype(np.float64)
    return np.asarray(Image.open(io.BytesIO(record.data)).convert("RGB"), np.float64)


def score(files: Sequence[Path], make_ours: Callable[[bytes], np.ndarray],
          reference: Callable[[Image.Image, Resample], np.ndarray]) -> tuple[list[float],
                                                                              list[float], int]:
    """Per-image distances of ours and of Pillow bilinear to Lanczos; size mismatches."""
    mine, pillow, mismatched = [], [], 0
    for path in files:
        data = path.read_bytes()
        image = full_decode(data)
        best = reference(image, Resample.LANCZOS)
        got = make_ours(data)
        if got.shape != best.shape:
            mismatched += 1
            continue
        mine.append(float(np.abs(got - best).mean()))
        pillow.append(float(np.abs(reference(image, Resample.BILINEAR) - best).mean()))
    return mine, pillow, mismatched


def report(name: str, mine: list[float], pillow: list[float], mismatched: int) -> bool:
    mean_o, mean_p = float(np.mean(mine)), float(np.mean(pillow))
    worst = max(range(len(mine)), key=lambda i: mine[i] / max(pillow[i], 1e-9))
    ok = mean_o <= BOUND * mean_p and mismatched == 0
    print(f"| {name} | {len(mine)} | {mean_o:.2f} | {mean_p:.2f} | {mean_o / mean_p:.2f} | "
          f"{mine[worst] / max(pillow[worst], 1e-9):.2f} | {mismatched} | "
          f"{'ok' if ok else 'FAIL'} |")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=254)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--resize", type=int, default=256)
    args = parser.parse_args(argv)
    items = [item for item in scan(args.folder).items
             if item.path.lower().endswith((".jpg", ".jpeg"))][: args.count]
    files = [Path(item.path) for item in items]
    print("| way | images | ours | Pillow bilinear | ratio | worst image ratio | "
          "size mismatches | bound |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    size = EncodeOptions(size=(args.size, args.size), pixels=True)
    resize = EncodeOptions(resize=args.resize, codec="png")
    ok = report(f"--size {args.size}x{args.size} (npy)", *score(
        files, lambda data: ours(data, size),
        lambda image, resample: size_reference(image, args.size, resample)))
    ok &= report(f"--resize {args.resize}", *score(
        files, lambda data: ours(data, resize),
        lambda image, resample: resize_reference(image, args.resize, resample)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
