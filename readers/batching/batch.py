"""`Batch`: what `PackedDataset.__getitems__` returns, a batch kept as its columns so that
`readers.collate` batches each in one go.

The images are one buffer of rows (an npy batch gathered in one copy: `rows`, (B, H, W,
3) uint8) or the samples as the per-sample path built them (`samples`: (image, label[,
key]) tuples, or whatever a `transform` made); beside them the samples' dataset indices
(`indices`: a RawBatch keeps them for the crop draws of `readers.decode_on`) and, with
`fields=`, one column per field (str fields one list of str, array fields one buffer of
their dtype, json number lists one float64 buffer, others value by value).

Building B sample tuples or dicts and taking them apart again in collate costs more than
reading the values, so a Batch builds a sample only when asked: it is a Sequence of the
very samples (tuples, or dicts with fields) the per-sample path builds, so
`default_collate`, a user's collate_fn and pickling (a plain list) see plain samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import torch

from readers.batching._pooled import PooledBatch, PooledDict
from readers.batching.fields_collate import IMAGE, LABEL, Column, collate_column, column_value

Sample = tuple[Any, ...]


class Batch(Sequence[Any]):
    """A batch as columns: images (`rows`, or per-sample `samples`), labels and keys,
    dataset `indices`, field columns; a Sequence of its samples."""

    def __init__(self, samples: Sequence[Any] | None = None, *,
                 rows: torch.Tensor | None = None, raw: bool = False,
                 labels: list[int] | None = None, keys: list[str] | None = None,
                 indices: Sequence[int] | None = None,
                 fields: dict[str, Column] | None = None) -> None:
        if (samples is None) == (rows is None):
            raise ValueError("a Batch holds either samples or rows")
        self.samples, self.rows, self.raw = samples, rows, raw
        self.labels = labels if labels is not None else []
        self.keys = keys
        self.indices = None if indices is None else [int(i) for i in indices]
        self.fields = fields
        self._flat: npt.NDArray[np.uint8] | None = None

    def with_fields(self, fields: dict[str, Column]) -> Batch:
        """The same batch, its samples dicts with these field columns."""
        return Batch(self.samples, rows=self.rows, raw=self.raw, labels=self.labels,
                     keys=self.keys, indices=self.indices, fields=fields)

    def __len__(self) -> int:
        return len(self.samples) if self.samples is not None else len(self.labels)

    @overload
    def __getitem__(self, k: int) -> Any: ...

    @overload
    def __getitem__(self, k: slice) -> list[Any]: ...

    def __getitem__(self, k: int | slice) -> Any:
        if isinstance(k, slice):
            return [self._sample(j) for j in range(len(self))[k]]
        return self._sample(range(len(self))[k])

    def __iter__(self) -> Iterator[Any]:
        return (self._sample(k) for k in range(len(self)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the list of samples it stands for."""
        return (list, (list(self),))

    def _sample(self, k: int) -> Any:
        plain = self._plain(k)
        return plain if self.fields is None else self.dict_of(k, plain)

    def _plain(self, k: int) -> Any:
        if self.samples is not None:
            return self.samples[k]
        image = self._image(k)
        if self.keys is None:
            return (image, self.labels[k])
        return (image, self.labels[k], self.keys[k])

    def _image(self, k: int) -> Any:
        assert self.rows is not None
        if not self.raw:
            return self.rows[k].permute(2, 0, 1)
        if self._flat is None:  # the rows as numpy once: each sample a view of it
            self._flat = self.rows.numpy().reshape(len(self), -1)
        return self._flat[k]

    def dict_of(self, k: int, sample: Sample) -> dict[str, Any]:
        """Sample k's dict around its plain sample (image, label[, key])."""
        out: dict[str, Any] = {IMAGE: sample[0], LABEL: sample[1]}
        for name, column in (self.fields or {}).items():
            out[name] = column_value(column, k)
        if len(sample) > 2:
            out["key"] = sample[2]
        return out

    def whole(self) -> torch.Tensor:
        """The gathered images as `readers.collate` gives them, uncopied: (B, 3, H, W)
        channels-last, or (B, H*W*3) raw rows."""
        assert self.rows is not None
        if self.raw:
            return self.rows.view(len(self), -1)
        return self.rows.permute(0, 3, 1, 2)

    def rests(self) -> list[Sample]:
        """Each sample's (label[, key]): what collate batches beside gathered images."""
        if self.keys is None:
            return [(label,) for label in self.labels]
        return list(zip(self.labels, self.keys, strict=True))

    def collate_columns(self, collate_images: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """What collating the samples' dicts gives, column by column: the images and
        labels through `collate_images`, each field at once."""
        images = collate_images(self._image_batch())
        out: dict[str, Any] = {IMAGE: images[0], LABEL: images[1]}
        for name, column in (self.fields or {}).items():
            out.update(collate_column(name, column))
        if self.keys is not None:
            out["key"] = list(self.keys)
        elif self.samples and len(self.samples[0]) > 2:
            out["key"] = [sample[2] for sample in self.samples]
        return out if not isinstance(images, PooledBatch) else PooledDict(out, images)

    def _image_batch(self) -> Batch | Sequence[Sample]:
        """The (image, label) samples, as the plain dataset would give them to collate."""
        if self.rows is not None:  # an npy batch: its one buffer
            return Batch(rows=self.rows, raw=self.raw, labels=self.labels)
        assert self.samples is not None
        pairs = [(sample[0], sample[1]) for sample in self.samples]
        return Batch(pairs, indices=self.indices)


def batch_labels(labels: Sequence[int], padded: Sequence[bool], pad_label: int) -> list[int]:
    """The labels, `pad_label` where the sample is a padding repeat."""
    return [pad_label if pad else label for label, pad in zip(labels, padded, strict=True)]
