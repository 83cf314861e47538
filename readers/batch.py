"""Batches of fixed-size pixel rows (the npy format) in one gather, and a collate that keeps them.

`PackedDataset.__getitems__` on a reader that can `gather` (npy) copies a whole batch
from the memory map in one `np.take` into one buffer, checks every row against its
digest there, and returns the samples as views of it: images are (3, H, W) views of
the (H, W, 3) rows (channels-last strides, as `readers.decode` gives them without a
resize); `decode="raw"` gives each row as a 1-D uint8 numpy array (bytes-like), so a
DataLoader batches rows into one tensor that travels in shared memory instead of
pickling them through a pipe.

torch's `default_collate` batches those samples as usual, into a fresh planar
(B, 3, H, W) tensor: a transposing copy of every image. `collate` (pass
`collate_fn=readers.collate` to the DataLoader) notices that the images already are one
batch and returns it as a (B, 3, H, W) tensor in channels-last memory format: same
shape and values, the layout torch's `channels_last` models want (call `.contiguous()`
for planar memory). In the main process (num_workers=0) that is the gathered buffer
itself; in a worker, one plain copy into shared memory. Anything else it hands to
`default_collate`.

Where the time goes (measured on the 2-core benchmark machine): a DataLoader worker
sends every batch in freshly allocated shared memory, and faulting in those pages
costs more than copying the pixels (~90 us per 224x224 image against ~20), for every
pipeline alike. An npy batch read in the main process skips it: num_workers=0 with
`collate` reads at about memcpy speed, which beats workers for npy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import default_collate, get_worker_info

Sample = tuple[Any, ...]


class Gatherer(Protocol):
    """A reader of fixed-size pixel rows that can copy several into one array at once."""

    def gather(self, indices: Sequence[int], out: npt.NDArray[np.uint8]) -> None:
        """Copy rows `indices` into `out` (len(indices), H, W, 3), each checked."""


def shared_buffer(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialized uint8 tensor in shared memory, as default_collate makes in workers."""
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)


def gathered_samples(reader: Gatherer, positions: Sequence[int], shape: tuple[int, int],
                     raw: bool, make: Callable[[int, Any], Sample]) -> list[Sample]:
    """One gather for the batch; `make(k, image)` builds sample k around its image view."""
    height, width = shape
    # ordinary memory: a fresh buffer of the same size reuses the freed one's pages
    rows = torch.empty((len(positions), height, width, 3), dtype=torch.uint8)
    reader.gather(positions, rows.numpy())
    if raw:
        flat = rows.numpy().reshape(len(positions), -1)
        return [make(k, flat[k]) for k in range(len(positions))]
    return [make(k, rows[k].permute(2, 0, 1)) for k in range(len(positions))]


def collate(batch: Sequence[Sample]) -> Any:
    """default_collate, but images gathered as one batch come back as it, uncopied.

    The result is [images, labels] or [images, labels, keys], like default_collate's.
    """
    whole = _whole_batch([sample[0] for sample in batch]) if batch else None
    if whole is None:
        return default_collate(list(batch))
    if get_worker_info() is not None:  # it leaves in shared memory: copy it there once
        shared = shared_buffer((whole.shape[0], *whole.shape[2:], whole.shape[1]))
        whole = shared.permute(0, 3, 1, 2).copy_(whole)
    rest = default_collate([sample[1:] for sample in batch])
    return [whole, *rest]


def _whole_batch(images: list[Any]) -> torch.Tensor | None:
    """The (B, 3, H, W) channels-last tensor that `images` are consecutive views of, or None."""
    first = images[0]
    if not isinstance(first, torch.Tensor) or first.dim() != 3 or first.dtype != torch.uint8:
        return None
    channels, height, width = first.shape
    step = channels * height * width
    storage = first.untyped_storage()
    if first.stride() != (1, width * channels, channels) or first.storage_offset() != 0 \
            or storage.nbytes() != step * len(images):
        return None
    pointer = storage.data_ptr()
    for k, image in enumerate(images):
        if not isinstance(image, torch.Tensor) or image.shape != first.shape \
                or image.stride() != first.stride() or image.storage_offset() != k * step \
                or image.untyped_storage().data_ptr() != pointer:
            return None
    return first.as_strided((len(images), channels, height, width),
                            (step, 1, width * channels, channels), 0)
