"""Pillow operations used at pack time: safe open, any mode to RGB, fit to a size.

JPEGs are opened with `draft`, which lets libjpeg scale in the DCT domain (1/2, 1/4,
1/8) before the final antialiased resize: far less work for large photos, same result
within rounding. Only DCT-based streams are drafted (`Frame.dct_scalable`): libjpeg
refuses to scale a lossless one ("broken data stream"), and a drafted decode that fails
anyway is retried whole, so a JPEG decodes here whenever Pillow can decode it at all.
"""

from __future__ import annotations

import io
import math
import warnings
from typing import Literal

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from packer.errors import UnsupportedImageError
from packer.imaging.jpeg_frame import read_frame

Fit = Literal["stretch", "crop", "pad"]
ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
WIDE_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
# A DCT-scaled decode stays at least this many times what the final resize needs, at pack
# time and train time alike (the readers' decode uses it too)
OVERSAMPLE = 2


def open_image(data: bytes) -> Image.Image:
    """Open image bytes lazily, turning Pillow's bomb warning into an error; a JPEG that
    Pillow does not take (12 or 16 bits) is refused with what kind of JPEG it is."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(io.BytesIO(data))
        except UnidentifiedImageError as exc:
            frame = read_frame(data)
            if frame is None or frame.precision == 8:
                raise
            raise UnsupportedImageError(f"{frame.precision}-bit {frame.kind} JPEG (marker "
                                   f"0x{frame.sof:02X}), which Pillow does not decode; "
                                   "re-encode it as an 8-bit JPEG or a PNG") from exc


def check_decodes(data: bytes) -> Image.Image:
    """Prove the whole image decodes; JPEGs decode at 1/8 scale, which still reads every byte."""
    image = open_image(data)
    return _load(image, data, (max(1, image.width // 8), max(1, image.height // 8)))


def _load(image: Image.Image, data: bytes, draft: tuple[int, int] | None) -> Image.Image:
    """Load the pixels, a JPEG scaled in the DCT domain to at least `draft` (width,
    height) where its stream allows; one whose drafted decode fails is decoded whole."""
    drafted = (draft is not None and image.format == "JPEG"
               and (frame := read_frame(data)) is not None and frame.dct_scalable)
    if drafted:
        image.draft("RGB", draft)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image.load()
        except OSError:
            if not drafted:
                raise
            image = open_image(data)
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
    return load_rgb_sized(data, scale, size=size, fit=fit, shorter=shorter, upscale=upscale)[0]


def load_rgb_sized(data: bytes, scale: float | None = None, *,
                   size: tuple[int, int] | None = None, fit: Fit = "crop",
                   shorter: int | None = None, upscale: bool = False
                   ) -> tuple[Image.Image, tuple[int, int]]:
    """The upright RGB image and its (width, height) before any DCT scaling.

    Given a target (`size` or `shorter`), a JPEG is drafted only down to OVERSAMPLE x
    what the resize needs, as the readers decode: libjpeg's DCT scaling to the target
    itself softens the image more than the antialiased resize from twice it. An
    explicit `scale` is drafted to as it is. Callers size their output from the
    returned original size, so it is the same on every decode path."""
    image = open_image(data)
    oriented = oriented_size(image)
    if scale is None:
        scale = min(1.0, OVERSAMPLE * target_scale(oriented, size, fit, shorter, upscale))
    need = (math.ceil(image.width * scale), math.ceil(image.height * scale))
    image = _load(image, data, need if scale <= 0.5 else None)
    image = ImageOps.exif_transpose(image) or image
    return to_rgb(image), oriented


def fit_image(image: Image.Image, size: tuple[int, int], fit: Fit,
              source: tuple[int, int] | None = None) -> Image.Image:
    """Resize to exactly (height, width): stretch, center crop, or pad with black.

    `source`: the (width, height) before a DCT-scaled decode; a padded image's size
    comes from it, so it does not depend on the decode's rounding."""
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
    source_w, source_h = source or (width, height)
    scale = min(out_w / source_w, out_h / source_h)
    new_w = min(out_w, max(1, round(source_w * scale)))
    new_h = min(out_h, max(1, round(source_h * scale)))
    canvas = Image.new("RGB", (out_w, out_h))
    canvas.paste(image.resize((new_w, new_h), Image.Resampling.BILINEAR),
                 ((out_w - new_w) // 2, (out_h - new_h) // 2))
    return canvas


def resize_shorter(image: Image.Image, shorter: int, upscale: bool,
                   source: tuple[int, int] | None = None) -> Image.Image:
    """Scale so the shorter side is `shorter`, keeping the aspect; never up unless asked.

    `source`: the (width, height) before a DCT-scaled decode; the output size comes
    from it (`round(side * scale)` of the original), whatever the decode's rounding."""
    width, height = source or image.size
    scale = shorter / min(width, height)
    if scale >= 1.0 and not upscale:
        return image
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return image.resize(size, Image.Resampling.BILINEAR)
