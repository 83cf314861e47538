"""A batch of stored sample bytes (decode="raw") as one buffer: what `readers.collate`
returns in place of a list of `bytes` objects.

One uint8 tensor holds the whole batch, a header then the bytes back to back:

    int64 offsets (B + 1)    sample b's bytes are data[offsets[b]:offsets[b + 1]]
    int64 indices (B)        the samples' dataset indices, -1 where the reader gave none
    uint8 data               every sample's stored bytes, in batch order

Why: GPU decoders (nvJPEG through torchvision, nvImageCodec) take a batch of encoded
bytes, and as a list of bytes a batch crosses from a DataLoader worker as one pickled
object per sample; as one buffer it crosses in the worker's recycled shared memory
(`SlotPool`) and moves to a device, or into pinned memory, in one copy.

A RawBatch still gives each sample's bytes: `len(batch)`, `batch.sample(i)` (also
`batch[i]` and iteration) is a zero-copy memoryview on the CPU (bytes-like: compare it
with bytes, hash it, `bytes(...)` copies it), a uint8 tensor view on another device.
It is deliberately not a `collections.abc.Sequence`: torch's pin-memory thread then
calls its `pin_memory()` instead of rebuilding it as a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

Allocate = Callable[[int], torch.Tensor]  # nbytes -> a 1-D uint8 tensor of that size
RAW_TYPES = (bytes, bytearray, memoryview)


def _empty(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8)


def header_bytes(count: int) -> int:
    """The size of a batch's header (offsets and indices) for `count` samples."""
    return 8 * (2 * count + 1)


class RawBatch:
    """`count` samples' stored bytes in one uint8 `buffer` (layout in the module doc)."""

    __slots__ = ("buffer", "count")

    def __init__(self, buffer: torch.Tensor, count: int) -> None:
        if buffer.dtype != torch.uint8 or buffer.dim() != 1 or count < 0 \
                or buffer.numel() < header_bytes(count):
            raise ValueError(f"a raw batch of {count} samples needs a 1-D uint8 buffer of at "
                             f"least {header_bytes(count)} bytes, not {tuple(buffer.shape)} "
                             f"{buffer.dtype}")
        self.buffer = buffer
        self.count = count

    @classmethod
    def of(cls, samples: Sequence[Any], indices: Sequence[int] | None = None,
           allocate: Allocate = _empty) -> RawBatch:
        """The samples (bytes-like) copied into one buffer from `allocate(nbytes)`."""
        count = len(samples)
        views = [memoryview(sample).cast("B") for sample in samples]
        ends = np.cumsum([len(view) for view in views], dtype=np.int64)
        start = header_bytes(count)
        total = int(ends[-1]) if count else 0
        out = cls(allocate(start + total), count)
        flat = out.buffer.numpy()
        header = flat[:start].view(np.int64)
        header[0] = 0
        header[1:count + 1] = ends
        header[count + 1:] = -1 if indices is None else np.asarray(indices, dtype=np.int64)
        at = start
        for view, end in zip(views, ends.tolist(), strict=True):
            flat[at:start + end] = view
            at = start + end
        return out

    @property
    def offsets(self) -> torch.Tensor:
        """int64 (B + 1): sample b is data[offsets[b]:offsets[b + 1]]."""
        return self.buffer[: 8 * (self.count + 1)].view(torch.int64)

    @property
    def indices(self) -> torch.Tensor | None:
        """int64 (B): the samples' indices in the packed dataset (with `split=`, in the whole
        dataset, not the split), or None where the reader gave none."""
        indices = self.buffer[8 * (self.count + 1): header_bytes(self.count)].view(torch.int64)
        return None if self.count and bool((indices < 0).any()) else indices

    @property
    def data(self) -> torch.Tensor:
        """uint8: every sample's bytes back to back."""
        end = header_bytes(self.count) + int(self.offsets[-1]) if self.count else None
        return self.buffer[header_bytes(self.count): end]

    @property
    def lengths(self) -> torch.Tensor:
        """int64 (B): each sample's size in bytes."""
        return self.offsets.diff()

    @property
    def device(self) -> torch.device:
        return self.buffer.device

    def __len__(self) -> int:
        return self.count

    def _span(self, i: int) -> tuple[int, int]:
        k = range(self.count)[i]
        start = header_bytes(self.count)
        pair = self.buffer[8 * k: 8 * (k + 2)].view(torch.int64).tolist()
        return start + pair[0], start + pair[1]

    def tensor(self, i: int) -> torch.Tensor:
        """Sample i's bytes as a uint8 tensor view of the buffer (on its device)."""
        start, end = self._span(i)
        return self.buffer[start:end]

    def memory(self, i: int) -> memoryview:
        """Sample i's bytes as a memoryview of the buffer (a batch on the CPU)."""
        if self.buffer.device.type != "cpu":
            raise ValueError(f"a memoryview needs a batch on the CPU, not on {self.device}: "
                             f"use tensor(i), or .to('cpu') first")
        start, end = self._span(i)
        return memoryview(self.buffer[start:end].numpy())  # type: ignore[arg-type]

    def sample(self, i: int) -> memoryview | torch.Tensor:
        """Sample i's bytes: a memoryview of the buffer on the CPU, else a tensor view."""
        return self.tensor(i) if self.buffer.device.type != "cpu" else self.memory(i)

    def __getitem__(self, i: int) -> memoryview | torch.Tensor:
        return self.sample(i)

    def __iter__(self) -> Iterator[memoryview | torch.Tensor]:
        if self.buffer.device.type != "cpu":
            return (self.tensor(k) for k in range(self.count))
        flat = self.buffer.numpy()
        start = header_bytes(self.count)
        ends = (self.offsets + start).tolist()
        return (memoryview(flat[ends[k]:ends[k + 1]]) for k in range(self.count))  # type: ignore[arg-type]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RawBatch:
        """The batch on `device`, in one copy of its buffer."""
        return RawBatch(self.buffer.to(device, non_blocking=non_blocking), self.count)

    def pin_memory(self, device: torch.device | str | None = None) -> RawBatch:
        """The batch in pinned host memory, in one copy (torch's pin-memory thread calls it)."""
        del device  # torch's pin-memory thread may pass one; pinning needs none
        return RawBatch(self.buffer.pin_memory(), self.count)

    def is_pinned(self) -> bool:
        return self.buffer.is_pinned()

    def __reduce__(self) -> tuple[Any, ...]:
        return RawBatch, (self.buffer, self.count)

    def __repr__(self) -> str:
        size = int(self.offsets[-1]) if self.count else 0
        return f"RawBatch({self.count} samples, {size} bytes, device={self.device})"
