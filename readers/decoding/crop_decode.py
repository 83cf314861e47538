"""Stored sample bytes + an augment -> the cropped, resized, flipped uint8 (3, H, W) tensor.

Why fused: the box is chosen from the JPEG header's size before decoding, so
libjpeg-turbo decodes at the coarsest DCT scale (1/2, 1/4, 1/8) that still keeps the box
at least OVERSAMPLE (2) times the output (the same rule as a decode with size=), and only
the pixels under the box and the filter's reach around it (the compiled extension where
built: the same pixels as the full decode, in less CPU time; CenterCrop, resized whole
as torchvision does, decodes it whole); then one antialiased bilinear resize of the box
straight to the output (torch's uint8 kernel on a view at full scale, or of the whole
image for CenterCrop; Pillow's, which takes a fractional box, on a DCT-scaled image), and
a flip of the small result. A full decode plus a Python transform pipeline does all of
that work at full resolution.

Why OVERSAMPLE is 2 and not 1: a DCT-scaled image exactly at the output size loses
detail that a bilinear resize keeps; at 2 the result stays about as close to a Lanczos
reference as Pillow's bilinear resize (`python -m devtools.bench.quality`).

Other codecs, and JPEGs the fast path declines (EXIF or XMP rotation, CMYK, a frame
header the native decoders are not known to handle, such as lossless or 12-bit), decode
in full through Pillow and take the box from the upright image; npy crops its stored
pixels.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from packer.imaging.jpeg import decode_box, fast_size, scaled_size
from readers.augment import Augment, Box, CenterCrop
from readers.decoding.decode import (
    Buffer,
    _decode_pillow,
    _pixels,
    dct_factor,
    resize_box_pillow,
    resize_hwc,
)


def decode_augmented(data: Buffer, augment: Augment, where: tuple[int, int, int],
                     pixels_shape: tuple[int, int] | None = None) -> torch.Tensor:
    """Sample bytes -> uint8 (3, H, W), planar; `where` is (seed, epoch, index)."""
    if pixels_shape is not None:
        return _finish(_pixels(data, pixels_shape), augment, where)
    out = _from_jpeg(data, augment, where)
    if out is not None:
        return out
    return _finish(_decode_pillow(data, None), augment, where)


def _from_jpeg(data: Buffer, augment: Augment,
               where: tuple[int, int, int]) -> torch.Tensor | None:
    """The fast path; None where Pillow must decode (the same cases as a plain decode)."""
    size = fast_size(data)
    if size is None:
        return None
    box = augment.params(*where, size)
    factor = dct_factor((box.height, box.width), augment.output_size)
    plan = whole_image_plan(augment, size, factor)
    region = (0, 0, *scaled_size(size, factor)) if plan else _region(
        box, factor, augment.output_size, size)
    pixels = decode_box(data, size, factor, region)
    if pixels is None:
        return None
    top, left = region[0] * factor, region[1] * factor
    inside = box._replace(top=box.top - top, left=box.left - left)
    return _resize_box(torch.from_numpy(pixels), inside, augment, factor, plan)


def _region(box: Box, factor: int, output_size: tuple[int, int],
            image_size: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, height, width) in 1/factor pixels to decode for `box`: the box itself
    if its edges are whole pixels at full size, else the pixels under it and the reach of
    Pillow's bilinear filter around it (its support: one output pixel's span, at least 1).
    """
    if _whole_pixels(box, factor):
        return int(box.top), int(box.left), int(box.height), int(box.width)
    span = max(box.height / output_size[0], box.width / output_size[1]) / factor
    margin = math.ceil(max(span, 1.0)) + 1
    scaled = scaled_size(image_size, factor)
    top = max(0, math.floor(box.top / factor) - margin)
    left = max(0, math.floor(box.left / factor) - margin)
    bottom = min(scaled[0], math.ceil((box.top + box.height) / factor) + margin)
    right = min(scaled[1], math.ceil((box.left + box.width) / factor) + margin)
    return top, left, bottom - top, right - left


def _whole_pixels(box: Box, factor: int) -> bool:
    """Whether the box's edges are whole pixels of the full-size image."""
    return factor == 1 and all(float(v).is_integer()
                               for v in (box.top, box.left, box.height, box.width))


def whole_image_plan(augment: Augment, image_size: tuple[int, int],
                     factor: int) -> tuple[tuple[int, int], int, int] | None:
    """CenterCrop's torchvision steps, which resize the whole image, where they apply."""
    if factor == 1 and isinstance(augment, CenterCrop):
        return augment.resize_then_crop(image_size)
    return None


def _finish(hwc: torch.Tensor, augment: Augment, where: tuple[int, int, int]) -> torch.Tensor:
    """Box chosen on the decoded (full-size) image, then crop, resize and flip."""
    image_size = (int(hwc.shape[0]), int(hwc.shape[1]))
    box = augment.params(*where, image_size)
    return _resize_box(hwc, box, augment, 1, whole_image_plan(augment, image_size, 1))


def _resize_box(hwc: torch.Tensor, box: Box, augment: Augment, factor: int,
                plan: tuple[tuple[int, int], int, int] | None) -> torch.Tensor:
    """Crop `box` (full-size pixels) out of an image decoded at 1/factor, resize, flip.

    A box of whole pixels at full size is a view, resized by torch's fast uint8 kernel;
    so is a full-size CenterCrop, resized whole then cut in whole pixels, as torchvision
    does. A DCT-scaled box has edges between pixels, and rounding them shifts and
    stretches the crop by up to a pixel, which moves the result visibly further from a
    Lanczos reference; Pillow's resize takes a fractional box exactly, so it resizes
    those.
    """
    output_size = augment.output_size
    image_size = (int(hwc.shape[0]), int(hwc.shape[1]))
    if plan is not None:
        resized, top, left = plan
        whole = resize_hwc(hwc, resized) if resized != image_size else hwc
        chw = whole[top:top + output_size[0], left:left + output_size[1]].permute(2, 0, 1)
    elif _whole_pixels(box, factor):
        top, left, height, width = int(box.top), int(box.left), int(box.height), int(box.width)
        crop = hwc[top:top + height, left:left + width]
        if tuple(crop.shape[:2]) != output_size:
            crop = resize_hwc(crop, output_size)
        chw = crop.permute(2, 0, 1)
    else:  # Pillow's resize of the box, given in 1/factor pixels
        edges = (box.left / factor, box.top / factor, (box.left + box.width) / factor,
                 (box.top + box.height) / factor)
        chw = resize_box_pillow(hwc, edges, output_size).permute(2, 0, 1)
    return chw.flip(-1) if box.flipped else chw.contiguous()


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """(3, H, W) -> (H, W, 3) numpy, for a PIL image of the result."""
    return np.ascontiguousarray(tensor.permute(1, 2, 0).numpy())
