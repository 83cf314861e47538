"""Stored sample bytes -> uint8 RGB tensor (or PIL image), resized in the decode step.

Why not just Pillow: at train time decode is the whole cost. JPEGs go through
libjpeg-turbo (simplejpeg), which scales in the DCT domain (down to 1/8) while the
scaled image stays at least OVERSAMPLE (2) times the target, so a large photo is never
fully decoded; the rest of the resize is torch's antialiased bilinear uint8 kernel on
channels-last memory, faster than the same kernel on planar memory and close to
Pillow's BILINEAR result (same filter; tests bound the difference).

Slower paths, chosen per image by the same rule as at pack time (`fast_size`): Pillow
for every other codec, for JPEGs that carry an EXIF or XMP orientation (simplejpeg
ignores it), CMYK/YCCK or RGB colour, for JPEG kinds the native decoders are not known
to handle (lossless, arithmetic-coded, 12-bit, odd sampling: the frame header is read
first), and for JPEGs that simplejpeg rejects. Any mode (L, LA, P, RGBA, CMYK, I;16)
ends up RGB.

Layout: "rgb8" returns a (3, H, W) tensor. After a resize its memory is planar
(torch's uint8 kernel writes it so, at no extra cost); without one it is a view of
the decoder's (H, W, 3) pixels, channels-last strides, because making it planar is
a transpose as costly as a small resize and `default_collate` copies into a fresh
planar batch anyway. Call `.contiguous()` where the layout of one sample matters.

Nothing here changes global state (torch threads included): DataLoader workers
already run torch single-threaded.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from packer.errors import DecodeError as DecodeError  # defined with every error class
from packer.imaging.jpeg import DCT_FACTORS, decode_scaled, fast_size
from packer.imaging.pillow import OVERSAMPLE, load_rgb

Mode = Literal["rgb8", "pil", "raw"]
Buffer = bytes | bytearray | memoryview
MODES: tuple[Mode, ...] = ("rgb8", "pil", "raw")


def decode(
    data: Buffer,
    mode: Mode = "rgb8",
    size: tuple[int, int] | None = None,
    *,
    pixels_shape: tuple[int, int] | None = None,
) -> torch.Tensor | Image.Image | Buffer:
    """Decode one stored sample.

    mode: "rgb8" (uint8 (3, H, W) tensor), "pil" (RGB image) or "raw" (`data` as is).
    size: (H, W) to stretch to, antialiased bilinear, or None for the stored size.
    pixels_shape: (H, W) when `data` is raw RGB pixels (the npy format): no decode.
    """
    _check_arguments(mode, size, pixels_shape)
    if mode == "raw":
        return data
    if pixels_shape:
        hwc = _pixels(data, pixels_shape)
        extent = (float(pixels_shape[0]), float(pixels_shape[1]))
    else:
        hwc, extent = _decode_hwc(data, size)
    if size is not None and tuple(hwc.shape[:2]) != size:
        hwc = _resize_whole(hwc, extent, size)
    if mode == "pil":
        return Image.fromarray(hwc.numpy(), "RGB")
    return hwc.permute(2, 0, 1)


def _check_arguments(mode: str, size: tuple[int, int] | None,
                     pixels_shape: tuple[int, int] | None) -> None:
    if mode not in MODES:
        raise ValueError(f"decode mode must be one of {', '.join(MODES)}, not {mode!r}")
    for name, shape in (("size", size), ("pixels_shape", pixels_shape)):
        if shape is not None and (len(shape) != 2 or min(shape) < 1):
            raise ValueError(f"{name} must be a positive (height, width), not {shape!r}")
    if mode == "raw" and size is not None:
        raise ValueError("decode mode 'raw' returns the stored bytes; it cannot resize "
                         "(pass size=None, or use mode 'rgb8' or 'pil')")


def _pixels(data: Buffer, shape: tuple[int, int]) -> torch.Tensor:
    """View raw RGB bytes as an (H, W, 3) tensor, copying only read-only input."""
    height, width = shape
    if isinstance(data, memoryview) and (data.ndim != 1 or data.itemsize != 1):
        data = data.cast("B")
    if len(data) != height * width * 3:
        raise DecodeError(f"{len(data)} bytes of raw pixels, but {height}x{width} RGB "
                          f"needs {height * width * 3}; the sample or the index is damaged")
    writable = isinstance(data, bytearray) or (isinstance(data, memoryview) and not data.readonly)
    buffer = data if writable else bytearray(data)
    return torch.frombuffer(buffer, dtype=torch.uint8).view(height, width, 3)


def _decode_hwc(data: Buffer, size: tuple[int, int] | None
                ) -> tuple[torch.Tensor, tuple[float, float]]:
    """Decode to (H, W, 3) uint8, libjpeg-turbo when it can, else Pillow; with the
    image's extent in those pixels (fractional where a DCT scale does not divide it)."""
    full = fast_size(data)  # the one fast path decision, shared with pack time
    if full is not None:
        factor = dct_factor(full, size) if size else 1
        pixels = decode_scaled(data, full, factor)
        if pixels is not None:
            return torch.from_numpy(pixels), (full[0] / factor, full[1] / factor)
    hwc = _decode_pillow(data, size)
    return hwc, (float(hwc.shape[0]), float(hwc.shape[1]))


def _resize_whole(hwc: torch.Tensor, extent: tuple[float, float],
                  size: tuple[int, int]) -> torch.Tensor:
    """Resize the image, `extent` (H, W) of hwc's pixels, to `size`.

    libjpeg rounds a side that the DCT scale does not divide up, the last pixel partly
    past the image: stretching it too shifts the result by up to half a scaled pixel,
    which breaks the quality bound (devtools/bench/quality.py) at 1/8 on smooth images.
    Pillow takes the fractional extent; torch's faster kernel does the rest.
    Both give planar memory.
    """
    if extent == (hwc.shape[0], hwc.shape[1]):
        return resize_hwc(hwc, size)
    out = resize_box_pillow(hwc, (0.0, 0.0, extent[1], extent[0]), size)
    return out.permute(2, 0, 1).contiguous().permute(1, 2, 0)


def resize_box_pillow(hwc: torch.Tensor, edges: tuple[float, float, float, float],
                      size: tuple[int, int]) -> torch.Tensor:
    """Pillow's antialiased bilinear resize of the box (left, top, right, bottom), in
    hwc's pixels and possibly fractional, to `size` (H, W): an (H, W, 3) tensor."""
    image = Image.fromarray(hwc.numpy(), "RGB")
    out = image.resize((size[1], size[0]), Image.Resampling.BILINEAR, box=edges)
    return torch.from_numpy(np.array(out))


def dct_factor(extent: tuple[float, float], target: tuple[int, int]) -> int:
    """The coarsest power-of-two DCT scale that keeps `extent` (H, W: the image, or the
    part of it that will be resized) at least OVERSAMPLE x the target.

    Powers of two only: simplejpeg's min_height alone may pick 3/8, which decodes slower
    and loses detail: further from a Lanczos reference than Pillow's bilinear resize,
    where 1/2 and 1/4 stay about as close as it.
    """
    for factor in DCT_FACTORS:
        if (extent[0] >= OVERSAMPLE * target[0] * factor
                and extent[1] >= OVERSAMPLE * target[1] * factor):
            return factor
    return 1


def _decode_pillow(data: Buffer, size: tuple[int, int] | None) -> torch.Tensor:
    """Pillow: any codec, EXIF orientation applied, any mode to RGB."""
    try:
        image = load_rgb(bytes(data), size=size, fit="stretch") if size else load_rgb(bytes(data))
        pixels = np.asarray(image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError,
            Image.DecompressionBombWarning) as exc:
        raise DecodeError(f"cannot decode image ({len(data)} bytes, starts "
                          f"{bytes(data[:8])!r}): {exc}") from exc
    if not pixels.flags.writeable:
        pixels = pixels.copy()
    return torch.from_numpy(pixels)


def resize_hwc(hwc: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Stretch (H, W, 3) uint8 to `size`, antialiased bilinear like Pillow's BILINEAR.

    The permuted view is channels-last NCHW, which picks torch's fast uint8 kernel
    (faster than on planar input); that kernel writes planar output, so the
    result is an (H, W, 3) view of planar memory.
    """
    batch = hwc.permute(2, 0, 1).unsqueeze(0)
    out = F.interpolate(batch, size=size, mode="bilinear", antialias=True,
                        align_corners=False)
    return out[0].permute(1, 2, 0)
