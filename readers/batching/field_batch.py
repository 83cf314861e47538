"""A batch of dict samples held as columns: what `PackedDataset.__getitems__` returns
with `fields=`, so that `readers.collate` batches each field in one go.

Decoding a batch's fields a sample at a time, building each sample's dict and its
small tensors, then taking them apart again in collate cost several times more than
reading the values. A FieldBatch keeps the batch as the plain samples (image, label[,
key]) plus one column per field, decoded column by column from the reader's checked
byte values (RecordReader.field_values_many in packer.formats.base): str fields as one
list of str, an array field (floats, ints) as one buffer of its dtype and a json field
of plain number lists (boxes) as one float64 buffer (readers.batching._number_arrays),
others value by value.

It is a Sequence of the very dicts the per-sample path built: `batch[k]` builds sample
k's dict on demand, so `default_collate`, a user's collate_fn and pickling (a plain
list of dicts) all see what they saw before. `readers.collate` instead calls
`collate_columns`, which gives what it gives for those dicts (fields_collate), with
the number arrays padded from the buffer by one masked assignment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import torch

from readers.batching._number_arrays import NumberArrays, pad_layout
from readers.batching._pooled import PooledBatch, PooledDict
from readers.batching.fields_collate import IMAGE, LABEL, LENGTHS_SUFFIX, collate_field
from readers.batching.gathered import GatheredRows
from readers.batching.raw_collate import IndexedSamples

Column = list[Any] | NumberArrays
Sample = tuple[Any, ...]


class FieldBatch(Sequence[dict[str, Any]]):
    """Plain samples + a column per field; a Sequence of the samples' dicts."""

    def __init__(self, samples: Sequence[Sample], columns: dict[str, Column]) -> None:
        self.samples = samples
        self.columns = columns

    def __len__(self) -> int:
        return len(self.samples)

    @overload
    def __getitem__(self, k: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, k: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, k: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(k, slice):
            return [self._sample(j) for j in range(len(self))[k]]
        return self._sample(range(len(self))[k])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._sample(k) for k in range(len(self)))

    def _sample(self, k: int) -> dict[str, Any]:
        return self.dict_of(k, self.samples[k])

    def dict_of(self, k: int, sample: Sample) -> dict[str, Any]:
        """Sample k's dict around its plain sample (image, label[, key])."""
        out: dict[str, Any] = {IMAGE: sample[0], LABEL: sample[1]}
        for name, column in self.columns.items():
            out[name] = _value(column, k)
        if len(sample) > 2:
            out["key"] = sample[2]
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the list of dicts it stands for."""
        return (list, (list(self),))

    def collate_columns(self, collate_images: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
        """What `collate_dicts(list(self), collate_images)` returns, column by column."""
        images = collate_images(self._plain_samples())
        out: dict[str, Any] = {IMAGE: images[0], LABEL: images[1]}
        for name, column in self.columns.items():
            out.update(_collate_column(name, column))
        if isinstance(self.samples, GatheredRows) and self.samples.keys is not None:
            out["key"] = list(self.samples.keys)
        elif self.samples and len(self.samples[0]) > 2:
            out["key"] = [sample[2] for sample in self.samples]
        return out if not isinstance(images, PooledBatch) else PooledDict(out, images)

    def _plain_samples(self) -> Sequence[Sample]:
        """The (image, label) samples, as the plain dataset would give them to collate."""
        if isinstance(self.samples, GatheredRows):  # an npy batch: its one buffer
            return self.samples.without_keys()
        if all(len(sample) == 2 for sample in self.samples):  # no keys: as they are
            return self.samples
        pairs = [(sample[0], sample[1]) for sample in self.samples]
        indices = getattr(self.samples, "indices", None)  # a raw batch's (IndexedSamples)
        return pairs if indices is None else IndexedSamples(pairs, indices)


def _value(column: Column, k: int) -> Any:
    if isinstance(column, NumberArrays):
        return torch.from_numpy(column.array(k))
    return column[k]


def _collate_column(name: str, column: Column) -> dict[str, Any]:
    if isinstance(column, NumberArrays):
        padded = _padded(name, column)
        if padded is not None:
            return padded
        column = [torch.from_numpy(column.array(k)) for k in range(len(column))]
    return collate_field(name, list(column))


def _padded(name: str, arrays: NumberArrays) -> dict[str, Any] | None:
    """collate_field's result for these arrays (stacked, or zero-padded with lengths),
    or None where it would keep them as a list (trailing shapes that differ)."""
    if arrays.rows is not None and arrays.rest is not None and arrays.rows.any():
        return _padded_ahead(name, arrays.flat, arrays.rows, arrays.rest, any(arrays.floats))
    shapes, count = arrays.shapes, len(arrays)
    kinds, distinct = set(arrays.floats), set(shapes)
    if len(distinct) == 1 and len(kinds) == 1:
        dtype = np.float32 if kinds.pop() else np.int64
        shape = distinct.pop()
        return {name: torch.from_numpy(arrays.flat.reshape(count, *shape).astype(dtype)),
                name + LENGTHS_SUFFIX: torch.full((count,), shape[0], dtype=torch.int64)}
    # as collate_field, worked out once per distinct shape, of which a batch has a few
    # (a boxes field: one per box count)
    rows, rest = pad_layout(distinct)
    if rest is None:
        return None
    lengths = np.array([rows[shape] for shape in shapes], dtype=np.int64)
    return _padded_ahead(name, arrays.flat, lengths, rest, True in kinds)


def _padded_ahead(name: str, flat: np.ndarray, lengths: np.ndarray, rest: tuple[int, ...],
                  floats: bool) -> dict[str, Any]:
    """Samples of `lengths` rows of shape `rest` (numbers back to back in `flat`),
    zero-padded to the longest, and their lengths. With every sample the same shape
    this is also the stacked batch: the same numbers, no padding."""
    longest = int(lengths.max())
    padded = np.zeros((len(lengths), longest, *rest), dtype=np.float32 if floats else np.int64)
    padded[np.arange(longest) < lengths[:, None]] = flat.reshape(-1, *rest)
    return {name: torch.from_numpy(padded), name + LENGTHS_SUFFIX: torch.from_numpy(lengths)}
