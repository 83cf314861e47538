"""`readers.decode_on` on a CUDA device: one batched JPEG decode there, then the geometry of
the whole batch in a few batched kernels.

The decoder (`choose` picks it) is imported on first use only: a DataLoader
worker, or a machine without CUDA, never imports it. Samples the CPU fast path would not
decode (other codecs, EXIF rotation, CMYK: `fast_size`), and images the
GPU decoder refuses, take the CPU path and are copied over.

Each image's box is augment.params on its header's size, as on the CPU path, and its
crop, resize, flip and pre-shrink are weight matrices (`Geometry`)
mirroring what the CPU path does for that box: the pixels differ from the CPU readers'
by the decoders' rounding and by the DCT-domain scaling that the pre-shrink stands in
for. Everything here is plain torch, so it runs on any device (tests run it on the CPU
with a stand-in decoder).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from packer.imaging.jpeg import fast_size
from readers.augment import Augment
from readers.batching.raw_batch import RawBatch, header_bytes
from readers.decoding import gpu_decoders
from readers.decoding._host_decode import Where, decode_cpu, stacked
from readers.decoding.batch_resize import Geometry, apply, box_axis, to_device, whole_axis
from readers.decoding.crop_decode import whole_image_plan
from readers.decoding.decode import dct_factor
from readers.decoding.gpu_decoders import Decoder

Size = tuple[int, int]


def decode_cuda(batch: RawBatch, device: torch.device, size: Size | None,
                augment: Augment | None, crops: Sequence[Where],
                decoder: Decoder | None = None) -> torch.Tensor:
    """(B, 3, H, W) uint8 on `device`; `decoder`: the one to use (default: the one
    `choose` picks for `device`)."""
    device = gpu_decoders.concrete(device)
    host = batch if batch.device.type == "cpu" else batch.to("cpu")
    samples = _samples(host)
    sizes = [fast_size(memoryview(sample.numpy())) for sample in samples]  # type: ignore[arg-type]
    fast = [b for b, found in enumerate(sizes) if found is not None]
    decoded: list[torch.Tensor | None] = []
    if fast:
        chosen = decoder or gpu_decoders.require(device)
        decoded = gpu_decoders.decode_each(chosen, [samples[b] for b in fast], device)
    images: dict[int, torch.Tensor] = {}
    for b, image in zip(fast, decoded, strict=True):
        if image is not None and _usable(image, sizes[b], device):
            images[b] = image
    on_cpu = [b for b in range(len(host)) if b not in images]
    cpu_images = decode_cpu(host, size, augment, crops, on_cpu)
    out_size = augment.output_size if augment is not None else size
    if out_size is None:  # no geometry: the images as decoded, all of one size
        every = {**images, **{b: image.to(device) for b, image in zip(on_cpu, cpu_images,
                                                                        strict=True)}}
        return stacked([every[b] for b in range(len(host))])
    out = torch.empty((len(host), 3, *out_size), dtype=torch.uint8, device=device)
    ordered = sorted(images)
    apply([images[b] for b in ordered],
          [geometry(sizes[b], size, augment, crops[b] if crops else None)  # type: ignore[arg-type]
           for b in ordered], out_size, out, ordered)
    if on_cpu:
        out[to_device(torch.tensor(on_cpu), device)] = to_device(stacked(cpu_images), device)
    return out


def _samples(host: RawBatch) -> list[torch.Tensor]:
    """Each sample's bytes as a uint8 CPU view, the offsets read once."""
    ends = host.offsets.tolist()
    start = header_bytes(len(host))
    return [host.buffer[start + ends[b]:start + ends[b + 1]] for b in range(len(host))]


def _usable(image: torch.Tensor, found: Size | None, device: torch.device) -> bool:
    """A decoded image of the header's size, 3 channels of uint8, on the device."""
    return (found is not None and image.dtype == torch.uint8
            and image.device == device and tuple(image.shape) == (3, *found))


def geometry(image_size: Size, size: Size | None, augment: Augment | None,
             where: Where | None) -> Geometry:
    """What the CPU path does to an image of `image_size` for size= or augment=."""
    height, width = image_size
    if augment is None or where is None:
        assert size is not None
        factor = dct_factor((float(height), float(width)), size)
        return Geometry(box_axis(height, 0.0, float(height), factor, size[0]),
                        box_axis(width, 0.0, float(width), factor, size[1]), False)
    out_h, out_w = augment.output_size
    box = augment.params(*where, image_size)
    factor = dct_factor((box.height, box.width), augment.output_size)
    plan = whole_image_plan(augment, image_size, factor)
    if plan is not None:  # torchvision's CenterCrop: the whole image resized, then cut
        (whole_h, whole_w), top, left = plan
        return Geometry(whole_axis(height, whole_h, top), whole_axis(width, whole_w, left),
                        False)
    return Geometry(box_axis(height, box.top, box.height, factor, out_h),
                    box_axis(width, box.left, box.width, factor, out_w), box.flipped)
