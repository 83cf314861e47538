"""`decode_on(batch, device)`: a raw batch (`RawBatch`) decoded
into one (B, 3, H, W) uint8 tensor on `device`, with the CPU readers' size= / augment=.

    loader = DataLoader(PackedDataset(path, decode="raw"), batch_size=256,
                        num_workers=4, collate_fn=readers.collate, pin_memory=True)
    for raw, labels in loader:
        images = readers.decode_on(raw, "cuda", augment=RandomResizedCrop(224),
                                   seed=0, epoch=epoch)

Why: where the CPU cores cannot decode JPEGs fast enough, the workers only read bytes
(a RawBatch crosses from them as one buffer) and the GPU decodes a whole batch at once.
Pass the batch as it comes from a loader with pin_memory=True: GPU JPEG decoders read the
encoded bytes from host memory, and pinned memory is what they copy from fastest.

On a CUDA device JPEGs decode there, in one batched call of the first decoder that passes
a probe decode (torchcodec, nvImageCodec, torchvision;
imported only then), retried image by image where the batch fails; the crops, resizes
and flips of the whole batch are then a few batched matrix products.
The boxes are the CPU path's (augment.params(seed,
epoch, index, image size)), so the same seed, epoch and index crop the same part of the
image; the pixels differ from the CPU readers' by the decoders' rounding
(devtools/gpu_check.py measures by how much). Samples the CPU fast path would not decode
(other codecs, EXIF rotation, CMYK) and images the GPU decoder refuses take the CPU path
and are copied to the device.

On any other device (and on a machine without CUDA) every sample goes through the CPU
readers' own decode (`decode`, `decode_augmented`): the same pixels as
PackedDataset(decode="rgb8", size=...) or (augment=..., seed=...) give.

RandomResizedCrop draws per sample index: PackedDataset's raw batches carry the
indices (RawBatch.indices); for batches without them (PackedIterableDataset) pass
`indices=`. CenterCrop needs none.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from readers.augment import Augment, CenterCrop
from readers.batching.raw_batch import RawBatch
from readers.decoding._host_decode import Where, decode_cpu, stacked

__all__ = ["decode_on"]

def decode_on(batch: RawBatch, device: torch.device | str, *,
              size: tuple[int, int] | None = None, augment: Augment | None = None,
              seed: int = 0, epoch: int = 0,
              indices: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
    """The batch's images as one (B, 3, H, W) uint8 tensor on `device`.

    size: (H, W) to stretch every image to, as decode="rgb8", size=... does.
    augment: RandomResizedCrop or CenterCrop, the box of sample `indices[b]` drawn
    from (seed, epoch, index) as PackedDataset(augment=..., seed=...) draws it.
    Without either, the images must all have one size.
    """
    if not isinstance(batch, RawBatch):
        raise TypeError(f"decode_on takes a RawBatch (readers.collate's batch of "
                        f"decode='raw' samples), not {type(batch).__name__}")
    if size is not None and augment is not None:
        raise ValueError(f"augment sets the output size ({augment.output_size}); "
                         f"pass size=None, not {size}")
    crops = crop_wheres(batch, augment, seed, epoch, indices)
    target = torch.device(device)
    if target.type == "cuda":
        from readers.decoding._cuda_decode import decode_cuda

        return decode_cuda(batch, target, size, augment, crops)
    host = batch if batch.device.type == "cpu" else batch.to("cpu")
    return stacked(decode_cpu(host, size, augment, crops)).to(target)


def crop_wheres(batch: RawBatch, augment: Augment | None, seed: int, epoch: int,
                 indices: Sequence[int] | torch.Tensor | None) -> list[Where]:
    """Each sample's (seed, epoch, index); the index is 0 where the crop ignores it."""
    if augment is None:
        return []
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed}")
    chosen = indices if indices is not None else batch.indices
    if chosen is None:
        if not isinstance(augment, CenterCrop):
            raise ValueError("RandomResizedCrop draws each sample's box from its dataset "
                             "index, and this batch carries none (PackedDataset's raw "
                             "batches do): pass indices=")
        chosen = [0] * len(batch)
    listed = chosen.tolist() if isinstance(chosen, torch.Tensor) else [int(i) for i in chosen]
    if len(listed) != len(batch):
        raise ValueError(f"{len(listed)} indices for a batch of {len(batch)} samples")
    return [(seed, epoch, index) for index in listed]
