"""readers.decode_on on a CUDA device: one batched JPEG decode there, then the crops.

The decoder, imported on first use only (a DataLoader worker, or a machine without
CUDA, never imports it): torchvision.io.decode_jpeg with device= (nvJPEG, the whole
batch in one call), else nvImageCodec (`nvidia.nvimgcodec`). Both give upright RGB.

The geometry (`finished`) is plain torch, so it runs on any device (tests run it on the
CPU): the box is augment.params on the decoded image's size, as on the CPU path; a
CenterCrop that torchvision would resize whole then cut does the same; any other box
is cut at whole pixels (RandomResizedCrop's boxes are whole pixels) and resized
antialiased bilinear in float, rounded to uint8; a flip last.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from packer.imaging.jpeg import fast_size
from readers.augment import Augment, CenterCrop
from readers.batching.raw_batch import RawBatch
from readers.decoding._host_decode import Where, decode_cpu, stacked

Decoder = Callable[[list[torch.Tensor], torch.device], list[torch.Tensor]]
_DECODERS: list[Decoder] = []


def decode_cuda(batch: RawBatch, device: torch.device, size: tuple[int, int] | None,
                augment: Augment | None, crops: Sequence[Where],
                decoder: Decoder | None = None) -> torch.Tensor:
    """(B, 3, H, W) uint8 on `device`; `decoder`: encoded uint8 CPU tensors -> (3, H, W)
    uint8 images on `device` (default: the best one installed)."""
    host = batch if batch.device.type == "cpu" else batch.to("cpu")
    fast = [b for b in range(len(host)) if fast_size(host.memory(b)) is not None]
    others = sorted(set(range(len(host))) - set(fast))
    images: list[torch.Tensor | None] = [None] * len(host)
    decoded = (decoder or best_decoder())([host.tensor(b) for b in fast], device) if fast else []
    for b, image in zip(fast, decoded, strict=True):
        images[b] = finished(image, size, augment, crops[b] if crops else None)
    for b, image in zip(others, decode_cpu(host, size, augment, crops, others), strict=True):
        images[b] = image.to(device)  # the CPU path's pixels: other codecs, EXIF, CMYK
    return stacked([image for image in images if image is not None])


def finished(chw: torch.Tensor, size: tuple[int, int] | None, augment: Augment | None,
             where: Where | None) -> torch.Tensor:
    """A decoded full-size (3, H, W) uint8 image resized (size=) or cropped (augment=)."""
    image_size = (int(chw.shape[1]), int(chw.shape[2]))
    if augment is None or where is None:
        return chw if size is None else resized(chw, size)
    plan = augment.resize_then_crop(image_size) if isinstance(augment, CenterCrop) else None
    out_h, out_w = augment.output_size
    if plan is not None:
        whole, top, left = plan
        return resized(chw, whole)[:, top:top + out_h, left:left + out_w].contiguous()
    box = augment.params(*where, image_size)
    top, left = round(box.top), round(box.left)
    bottom = max(top + 1, round(box.top + box.height))
    right = max(left + 1, round(box.left + box.width))
    out = resized(chw[:, top:bottom, left:right], (out_h, out_w))
    return out.flip(-1) if box.flipped else out


def resized(chw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Antialiased bilinear resize of a (3, H, W) uint8 image, in float, rounded."""
    if tuple(chw.shape[1:]) == tuple(size):
        return chw.contiguous()
    out = F.interpolate(chw.unsqueeze(0).float(), size=size, mode="bilinear",
                        antialias=True, align_corners=False)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


def best_decoder() -> Decoder:
    """torchvision's batched decode_jpeg on the device, else nvImageCodec's."""
    if not _DECODERS:
        _DECODERS.append(_torchvision() or _nvimgcodec() or _missing)
    return _DECODERS[0]


def _torchvision() -> Decoder | None:
    try:
        io = importlib.import_module("torchvision.io")
    except (ImportError, RuntimeError):  # absent, or built for another torch
        return None

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        out = io.decode_jpeg(data, mode=io.ImageReadMode.RGB, device=device)
        return list(out) if isinstance(out, list) else [out]

    return decode


def _nvimgcodec() -> Decoder | None:
    try:
        nvimgcodec = importlib.import_module("nvidia.nvimgcodec")
    except ImportError:
        return None
    decoder = nvimgcodec.Decoder()

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
        with torch.cuda.device(device):
            images = decoder.decode([tensor.numpy() for tensor in data])
            return [torch.as_tensor(image, device=device).permute(2, 0, 1) for image in images]

    return decode


def _missing(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    raise ImportError("readers.decode_on decodes on a CUDA device with torchvision "
                      "(pip install torchvision, built for this torch) or nvImageCodec "
                      "(pip install nvidia-nvimgcodec-cu12); neither is installed")
