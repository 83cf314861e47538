"""Pillow operations used at pack time: safe open, any mode to RGB, fit to a size.

JPEGs are opened with `draft`, which lets libjpeg scale in the DCT domain (1/2, 1/4,
1/8) before the final antialiased resize: far less work for large photos, same result
within rounding.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Literal

import numpy as np
from PIL import Image, ImageOps

Fit = Literal["stretch", "crop", "pad"]
ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
WIDE_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N", "F"})


def open_image(data: bytes) -> Image.Image:
    """Open image bytes lazily, turning Pillow's bomb warning into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return Image.open(io.BytesIO(data))


def check_decodes(data: bytes) -> Image.Image:
    """Prove the whole image decodes; JPEGs decode at 1/8 scale, which still reads every byte."""
    image = open_image(data)
    if image.format == "JPEG":
        image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        image.load()
    return image


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any mode to RGB: 16-bit scaled to 8, transparency composited on white."""
    if image.mode in WIDE_MODES:
        array = np.asarray(image).astype(np.float64)
        scale = 1.0 / 256.0 if image.mode != "F" and array.max(initial=0) > 255 else 1.0
        image = Image.fromarray(np.clip(array * scale, 0, 255).astype(np.uint8), mode="L")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ALPHA_MODES:
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image if image.mode == "RGB" else image.convert("RGB")


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """(width, height) after applying the EXIF orientation."""
    orientation = image.getexif().get(0x0112, 1)
    width, height = image.size
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def target_scale(src: tuple[int, int], size: tuple[int, int] | None, fit: Fit,
                 shorter: int | None, upscale: bool) -> float:
    """The resize factor the final image needs (for draft); 1.0 means keep the size."""
    width, height = src
    if size is not None:
        out_h, out_w = size
        ratios = (out_w / width, out_h / height)
        return max(ratios) if fit in ("crop", "stretch") else min(ratios)
    if shorter is not None:
        scale = shorter / min(width, height)
        return scale if scale < 1.0 or upscale else 1.0
    return 1.0


def load_rgb(data: bytes, scale: float | None = None, *, size: tuple[int, int] | None = None,
             fit: Fit = "crop", shorter: int | None = None, upscale: bool = False) -> Image.Image:
    """Decode to an upright RGB image, letting JPEG draft skip work the resize would discard."""
    image = open_image(data)
    oriented = oriented_size(image)
    scale = target_scale(oriented, size, fit, shorter, upscale) if scale is None else scale
    if image.format == "JPEG" and scale < 0.5:
        need = (math.ceil(image.width * scale), math.ceil(image.height * scale))
        image.draft("RGB", need)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        image.load()
    image = ImageOps.exif_transpose(image) or image
    return to_rgb(image)


def fit_image(image: Image.Image, size: tuple[int, int], fit: Fit) -> Image.Image:
    """Resize to exactly (height, width): stretch, center crop, or pad with black."""
    out_h, out_w = size
    width, height = image.size
    if fit == "stretch":
        return image.resize((out_w, out_h), Image.Resampling.BILINEAR)
    if fit == "crop":
        scale = max(out_w / width, out_h / height)
        box_w, box_h = min(width, out_w / scale), min(height, out_h / scale)
        left, top = (width - box_w) / 2, (height - box_h) / 2
        box = (left, top, left + box_w, top + box_h)
        return image.resize((out_w, out_h), Image.Resampling.BILINEAR, box=box)
    scale = min(out_w / width, out_h / height)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    canvas = Image.new("RGB", (out_w, out_h))
    canvas.paste(image.resize((new_w, new_h), Image.Resampling.BILINEAR),
                 ((out_w - new_w) // 2, (out_h - new_h) // 2))
    return canvas


def resize_shorter(image: Image.Image, shorter: int, upscale: bool) -> Image.Image:
    """Scale so the shorter side is `shorter`, keeping the aspect; never up unless asked."""
    width, height = image.size
    scale = shorter / min(width, height)
    if scale >= 1.0 and not upscale:
        return image
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR)
