"""Batches of dict samples ({"image", "label", <fields>}): `collate_dicts`.

`readers.collate` hands a batch of dicts here. Each key becomes one batched value:

    image            as `collate` batches images: one (B, 3, H, W) tensor, channels-last
                     where the samples were, sent from a worker in recycled shared memory
    equal shapes     tensors / numpy arrays of one shape: stacked, (B, *shape)
    ragged arrays    tensors of the same trailing shape and first dimensions n_b (boxes
                     (n, 4)): zero-padded to (B, max n, *trailing), dtypes promoted (int64
                     and float32 boxes give float32)
    <name>_lengths   (B,) int64 beside every batched array of one or more dimensions:
                     n_b, whether the batch was padded or happened to need no padding
                     (every image with 3 boxes, or batch_size=1), so a batch's keys
                     do not depend on its row counts (a batch kept as a list, below,
                     has none)
    int, float, bool of one type in every sample: a tensor, as default_collate makes
    anything else   strings, JSON objects, bytes, None, mixed types: a list of the values

An empty array (shape (0,): a sample with no boxes) pads like any other, taking the
trailing shape of the others. A field some samples hold as arrays and others as Python
values (a JSON list of numbers in one, of strings in another) stays a list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from readers.batching._number_arrays import NumberArrays, pad_layout
from readers.batching._pooled import PooledBatch, PooledDict

IMAGE, LABEL = "image", "label"
LENGTHS_SUFFIX = "_lengths"
_SCALARS = (bool, int, float)


def collate_dicts(batch: Sequence[dict[str, Any]],
                  collate_images: Callable[[list[Any]], Any]) -> dict[str, Any]:
    """One dict batch; `collate_images` is `readers.collate` on (image, label) tuples."""
    names = list(batch[0])
    for sample in batch:
        if list(sample) != names:
            raise ValueError(f"cannot collate dict samples with different keys: {names} "
                             f"and {list(sample)}; give every sample the same fields")
    out: dict[str, Any] = {}
    pooled: PooledBatch | None = None
    if IMAGE in batch[0]:
        labelled = LABEL in batch[0]
        images = collate_images([(s[IMAGE], s[LABEL] if labelled else 0) for s in batch])
        out[IMAGE] = images[0]
        if labelled:
            out[LABEL] = images[1]
        pooled = images if isinstance(images, PooledBatch) else None
    for name in names:
        if name not in out:
            out.update(collate_field(name, [sample[name] for sample in batch]))
    ordered = {name: out[name] for name in _ordered_names(names, out)}
    return ordered if pooled is None else PooledDict(ordered, pooled)


def _ordered_names(names: list[str], out: dict[str, Any]) -> list[str]:
    """The samples' order, each `<name>_lengths` right after its field."""
    ordered: list[str] = []
    for name in names:
        ordered.append(name)
        if name + LENGTHS_SUFFIX in out and name + LENGTHS_SUFFIX not in names:
            ordered.append(name + LENGTHS_SUFFIX)
    return ordered


def collate_field(name: str, values: list[Any]) -> dict[str, Any]:
    """{name: batched values} (and `<name>_lengths` for padded ones), as the table above."""
    arrays = _as_tensors(values)
    if arrays is not None:
        return _array_batch(name, arrays, values)
    kind = type(values[0])
    if kind in _SCALARS and all(type(value) is kind for value in values):
        return {name: default_collate(values)}
    return {name: list(values)}


def _as_tensors(values: list[Any]) -> list[torch.Tensor] | None:
    """The values as tensors when every one is a tensor or a numeric numpy array, else None."""
    tensors: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            value = torch.from_numpy(value)
        if not isinstance(value, torch.Tensor):
            return None
        tensors.append(value)
    return tensors


def _array_batch(name: str, arrays: list[torch.Tensor], values: list[Any]) -> dict[str, Any]:
    first = arrays[0]
    if all(array.shape == first.shape and array.dtype == first.dtype for array in arrays):
        stacked = torch.stack(arrays)
        return {name: stacked} if first.dim() == 0 else \
            {name: stacked, name + LENGTHS_SUFFIX: torch.full((len(arrays),), len(first),
                                                              dtype=torch.int64)}
    trailing = _trailing_shape(arrays)
    if trailing is None:
        return {name: list(values)}
    dtype = functools.reduce(torch.promote_types, [array.dtype for array in arrays])
    counts = [len(array) if array.numel() else 0 for array in arrays]
    padded = torch.zeros((len(arrays), max(counts), *trailing), dtype=dtype)
    for row, (array, count) in enumerate(zip(arrays, counts, strict=True)):
        if count:
            padded[row, :count] = array  # one preallocated batch: no per-row casts
    return {name: padded, name + LENGTHS_SUFFIX: torch.tensor(counts, dtype=torch.int64)}


def _trailing_shape(arrays: list[torch.Tensor]) -> tuple[int, ...] | None:
    """The shape after the first dimension that every non-empty array shares, or None
    (scalars, or shapes that differ past the first dimension: nothing to pad along)."""
    shapes = {tuple(array.shape[1:]) for array in arrays if array.numel()}
    if any(array.dim() == 0 for array in arrays) or len(shapes) > 1:
        return None
    return shapes.pop() if shapes else ()


Column = list[Any] | NumberArrays


def column_value(column: Column, k: int) -> Any:
    """Value k of a field column (a number array as a tensor)."""
    if isinstance(column, NumberArrays):
        return torch.from_numpy(column.array(k))
    return column[k]


def collate_column(name: str, column: Column) -> dict[str, Any]:
    """A field column batched as `collate_field` batches its values."""
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
