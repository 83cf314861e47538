"""Crop, resize and flip a batch of decoded images with a few batched matrix products.

An antialiased bilinear resize is linear and separable: along each axis, output pixel i
is a weighted sum of input pixels. So each image's whole geometry (the box, the resize
of the box, the window a CenterCrop keeps, a flip, and the integer pre-shrink that
mirrors the CPU path's DCT scaling) is one weight matrix per axis, and

    out[b, c] = rows[b] @ region[b, c] @ cols[b].T

for every image of a chunk at once (`torch.bmm`), the regions padded with zeros to the
chunk's largest. The weights are the triangle filter Pillow and torch's antialiased
bilinear kernel use (centre at (i + 0.5) * scale, support max(scale, 1), normalised),
computed in float32 on the images' device, so the result is the CPU path's resize up to
rounding, on any device, with no per-image kernel beyond the copy of its region and no
wait of the host for the GPU. (Where a program allows TF32 matrix products,
torch.set_float32_matmul_precision("high"), the products round a little further.)

Where the CPU path decodes at 1/factor in the DCT domain (`dct_factor`:
a box at least OVERSAMPLE times the output), the weights first average factor x factor
blocks aligned to the image origin, as that decode's pixels are, then filter those: the
same pixels the CPU path filters, and large downscales cost nothing extra.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

CHUNK_ELEMENTS = 1 << 27  # float32 elements of one chunk's padded regions (512 MiB)


@dataclass(frozen=True)
class Axis:
    """One axis of one image's geometry, in full-size pixels of the decoded image.

    start, stop: the region copied from the image (start a multiple of factor);
    box_start, box_length: the box, which may fall between pixels;
    factor: pixels averaged per scaled pixel before filtering (1: none);
    target: the box is resized to this many pixels, of which offset.. offset + out are
    kept (offset 0 and target == out except for CenterCrop's resize-then-cut).
    """

    start: int
    stop: int
    box_start: float
    box_length: float
    factor: int
    target: int
    offset: int

    @property
    def length(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Geometry:
    rows: Axis
    cols: Axis
    flipped: bool


def box_axis(length: int, box_start: float, box_length: float, factor: int,
             out: int) -> Axis:
    """The axis that resizes a box to `out` pixels, as the CPU path does.

    At factor 1 a box of whole pixels is cut and resized alone (torch's crop then
    resize: the filter reads only the box). Otherwise the filter reads the scaled pixels
    around the box too (Pillow's resize of a fractional box), so the region adds its
    reach, clipped to the image.
    """
    if factor == 1 and float(box_start).is_integer() and float(box_length).is_integer():
        start, whole = int(box_start), max(1, int(box_length))
        return Axis(start, start + whole, float(start), float(whole), 1, out, 0)
    reach = math.ceil(max(box_length / factor / out, 1.0)) + 1
    first = max(0, math.floor(box_start / factor) - reach)
    last = math.ceil((box_start + box_length) / factor) + reach
    return Axis(first * factor, min(length, last * factor), box_start, box_length,
                factor, out, 0)


def whole_axis(length: int, target: int, offset: int) -> Axis:
    """The axis that resizes the whole image to `target` and keeps offset.. (no shrink)."""
    return Axis(0, length, 0.0, float(length), 1, target, offset)


def apply(images: Sequence[torch.Tensor], geometry: Sequence[Geometry],
          out_size: tuple[int, int], out: torch.Tensor,
          slots: Sequence[int] | None = None) -> None:
    """Write each (3, H, W) uint8 image through its geometry into out[slots[k]] (out:
    (B, 3, h, w) uint8 on the images' device; slots default to 0, 1, ...).

    Images go in chunks of similar region size, so padding stays small and memory bounded.
    """
    rows = list(range(len(images))) if slots is None else list(slots)
    order = sorted(range(len(images)), key=lambda b: geometry[b].rows.length
                   * geometry[b].cols.length)
    for chunk in _chunks(order, geometry):
        _apply_chunk([images[b] for b in chunk], [geometry[b] for b in chunk], out_size,
                     out, [rows[b] for b in chunk])


def _chunks(order: list[int], geometry: Sequence[Geometry]) -> list[list[int]]:
    """Consecutive images whose regions, padded to the chunk's tallest and widest, fit
    CHUNK_ELEMENTS (one image at least)."""
    chunks: list[list[int]] = []
    current: list[int] = []
    height = width = 0
    for b in order:
        tall, wide = max(height, geometry[b].rows.length), max(width, geometry[b].cols.length)
        if current and (len(current) + 1) * 3 * tall * wide > CHUNK_ELEMENTS:
            chunks.append(current)
            current, tall, wide = [], geometry[b].rows.length, geometry[b].cols.length
        current.append(b)
        height, width = tall, wide
    return chunks + ([current] if current else [])


def to_device(values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small CPU tensor on `device` without making the host wait for queued GPU work
    (a copy from pageable memory would: it goes through pinned memory instead)."""
    if device.type != "cuda":
        return values.to(device)
    return values.pin_memory().to(device, non_blocking=True)


def _apply_chunk(images: list[torch.Tensor], geometry: list[Geometry],
                 out_size: tuple[int, int], out: torch.Tensor, where: list[int]) -> None:
    device = out.device
    height = max(g.rows.length for g in geometry)
    width = max(g.cols.length for g in geometry)
    regions = torch.zeros((len(images), 3, height, width), dtype=torch.float32, device=device)
    for k, (image, g) in enumerate(zip(images, geometry, strict=True)):
        regions[k, :, :g.rows.length, :g.cols.length].copy_(
            image[:, g.rows.start:g.rows.stop, g.cols.start:g.cols.stop])
    rows = weights([g.rows for g in geometry], out_size[0], height, device)
    cols = weights([g.cols for g in geometry], out_size[1], width, device)
    flipped = to_device(torch.tensor([g.flipped for g in geometry]), device)
    cols = torch.where(flipped[:, None, None], cols.flip(1), cols)
    n = len(images)
    across = torch.bmm(regions.view(n, 3 * height, width), cols.transpose(1, 2))
    across = across.view(n, 3, height, out_size[1]).permute(0, 2, 1, 3)
    done = torch.bmm(rows, across.reshape(n, height, 3 * out_size[1]))
    pixels = done.view(n, out_size[0], 3, out_size[1]).permute(0, 2, 1, 3)
    out[to_device(torch.tensor(where), device)] = pixels.round().clamp_(0, 255).to(torch.uint8)


def weights(axes: Sequence[Axis], out: int, padded: int,
            device: torch.device) -> torch.Tensor:
    """(B, out, padded) float32: output pixel i of image b from its region's pixels."""
    params = torch.tensor([[a.start, a.length, a.box_start, a.box_length, a.factor,
                            a.target, a.offset] for a in axes], dtype=torch.float32)
    on_device = to_device(params, device)
    start, length, box_start, box_length, factor, target, offset = (
        on_device[:, k, None, None] for k in range(7))
    scale = box_length / factor / target
    centre = (box_start - start) / factor + (offset + torch.arange(
        out, device=device, dtype=torch.float32)[None, :, None] + 0.5) * scale
    support = scale.clamp(min=1.0)
    scaled = int(max(-(-a.length // a.factor) for a in axes))
    grid = torch.arange(scaled, device=device, dtype=torch.float32)[None, None, :]
    inside = grid < torch.ceil(length / factor)
    tri = ((1 - (grid + 0.5 - centre).abs() / support).clamp(min=0) * inside)
    tri = tri / tri.sum(-1, keepdim=True).clamp(min=1e-12)
    pixel = torch.arange(padded, device=device, dtype=torch.float32)[None, :]
    cell = torch.div(pixel, factor[:, :, 0], rounding_mode="floor")
    count = torch.minimum(factor[:, :, 0], length[:, :, 0] - cell * factor[:, :, 0])
    share = torch.where(pixel < length[:, :, 0], 1 / count.clamp(min=1), 0.0)
    index = cell.clamp(max=scaled - 1).long()[:, None, :].expand(-1, out, -1)
    return tri.gather(2, index) * share[:, None, :]
