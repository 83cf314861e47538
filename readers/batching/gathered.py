"""An npy batch gathered in one copy, held as that one buffer: what
`PackedDataset.__getitems__` returns for stored pixel rows without a transform.

The rows of a batch are one (B, H, W, 3) uint8 buffer (readers.batching.collate's
gather). Building B sample tuples around B views of it, and then finding in collate
that those views are one batch again, cost more CPU than copying and checking the
pixels. A GatheredRows keeps the buffer, the labels and the keys; `readers.collate`
takes the buffer as the batch at once (`whole`), and anything else sees a Sequence of
the very samples the per-sample path built: `batch[k]` makes sample k's tuple on demand
(image a (3, H, W) channels-last view, or with `decode="raw"` a 1-D uint8 numpy row),
and pickling gives the plain list of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import torch

Sample = tuple[Any, ...]


class GatheredRows(Sequence[Sample]):
    """A batch of npy samples as one buffer of rows, their labels and (optionally) keys."""

    def __init__(self, rows: torch.Tensor, raw: bool, labels: list[int],
                 keys: list[str] | None) -> None:
        self.rows = rows  # (B, H, W, 3) uint8
        self.raw = raw
        self.labels = labels
        self.keys = keys
        self._flat: npt.NDArray[np.uint8] | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, k: int) -> Sample: ...

    @overload
    def __getitem__(self, k: slice) -> list[Sample]: ...

    def __getitem__(self, k: int | slice) -> Sample | list[Sample]:
        if isinstance(k, slice):
            return [self._sample(j) for j in range(len(self))[k]]
        return self._sample(range(len(self))[k])

    def __iter__(self) -> Iterator[Sample]:
        return (self._sample(k) for k in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the list of samples it stands for."""
        return (list, (list(self),))

    def _sample(self, k: int) -> Sample:
        image = self._image(k)
        if self.keys is None:
            return (image, self.labels[k])
        return (image, self.labels[k], self.keys[k])

    def _image(self, k: int) -> Any:
        if not self.raw:
            return self.rows[k].permute(2, 0, 1)
        if self._flat is None:  # the rows as numpy once: each sample a view of it
            self._flat = self.rows.numpy().reshape(len(self), -1)
        return self._flat[k]

    def whole(self) -> torch.Tensor:
        """The batch's images as `readers.collate` gives them, uncopied: (B, 3, H, W)
        channels-last, or (B, H*W*3) raw rows."""
        if self.raw:
            return self.rows.view(len(self), -1)
        return self.rows.permute(0, 3, 1, 2)

    def without_keys(self) -> GatheredRows:
        """The same batch as (image, label) samples (a FieldBatch's images)."""
        return GatheredRows(self.rows, self.raw, self.labels, None)

    def rests(self) -> list[Sample]:
        """Each sample's (label[, key]): what collate batches beside the images."""
        if self.keys is None:
            return [(label,) for label in self.labels]
        return list(zip(self.labels, self.keys, strict=True))


def batch_labels(labels: Sequence[int], padded: Sequence[bool], pad_label: int) -> list[int]:
    """The labels, `pad_label` where the sample is a padding repeat."""
    return [pad_label if pad else label for label, pad in zip(labels, padded, strict=True)]
