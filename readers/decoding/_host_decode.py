"""The CPU side of `readers.decode_on`: the CPU readers' decode of a raw batch's samples,
shared by the CPU fallback (`decode_on` off CUDA) and the CUDA path's samples that the
fast path declines (`decode_cuda`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from readers.augment import Augment
from readers.batching.raw_batch import RawBatch
from readers.decoding.crop_decode import decode_augmented
from readers.decoding.decode import decode

Where = tuple[int, int, int]  # (seed, epoch, index) of a sample's crop


def decode_cpu(batch: RawBatch, size: tuple[int, int] | None, augment: Augment | None,
               crops: Sequence[Where], picks: Sequence[int] | None = None
               ) -> list[torch.Tensor]:
    """The CPU readers' (3, H, W) image of every sample (or of samples `picks`)."""
    out: list[torch.Tensor] = []
    for b in range(len(batch)) if picks is None else picks:
        data = batch.memory(b)
        if augment is not None:
            out.append(decode_augmented(data, augment, crops[b]))
        else:
            out.append(cast(torch.Tensor, decode(data, "rgb8", size)))  # rgb8: a tensor
    return out


def stacked(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """(B, 3, H, W) of images of one size; a clear error for images of several."""
    shapes = {tuple(image.shape) for image in images}
    if len(shapes) > 1:
        raise ValueError(f"the batch's images have {len(shapes)} sizes ({sorted(shapes)[:3]}"
                         f"...): pass size=(H, W) or augment= to give them one")
    if not images:
        return torch.empty((0, 3, 0, 0), dtype=torch.uint8)
    return torch.stack(list(images))
