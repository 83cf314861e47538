"""Per-sample fields in the datasets' samples: `fields=("caption", "boxes")` or "all".

With fields a sample is a dict, `{"image", "label", <fields>}` (+ "key" with
`with_keys=True`), that `default_collate` and `readers.collate` batch (the latter pads
ragged arrays, readers.batching.fields_collate); without, it stays `(image, label[, key])`.

Values come from the format's record reader, a batch at a time (`field_values_many`:
every sample's values in byte form, checked against its digest), in the process that
reads, and are decoded column by column into a FieldBatch (readers.batching.field_batch)
that `readers.collate` batches at once; nothing is held between batches: the metadata
of the whole dataset stays in the reader's numpy tables and files. A reader without
`field_values_many` is read through `fields_many` (values decoded by packer). Numeric
values become arrays on the way out, the same on either path:

    JSON list of numbers (nested, rectangular)   tensor: float32 if any number is a
                                                 float (boxes (n, 4)), float64 if one
                                                 overflows float32 (1e300), else int64
    empty JSON list                              float32 tensor of shape (0,)
    numpy array (a numeric npy field)            tensor of its dtype
    floats / ints field (packer.core.field_      float32 / int64 tensor of the stored
    arrays)                                      shape, (0, 4) and (1, 0) included
    anything else (str, int, float, bool, dict,  unchanged: floats stay Python floats,
    bytes, lists of strings, None when missing)  bit-exact

A padding sample (PaddedIndex, label PAD_LABEL) is a repeat of a real one and keeps its
fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from packer.core.field_arrays import FLOAT32_MAX
from packer.core.fields import FieldSpec, decode_value, numbered
from packer.core.index import Index
from packer.formats.base import RecordReader
from readers.batching._number_arrays import parse_arrays, stored_arrays
from readers.batching.field_batch import Column, FieldBatch

FieldNames = Sequence[str] | Literal["all"] | None

__all__ = ["FieldNames", "chosen_fields", "fields_ahead", "natural", "with_fields",
           "with_fields_many"]


def dataset_fields(index: Index) -> tuple[str, ...]:
    return tuple(spec.name for spec in index.fields)


def chosen_fields(index: Index, fields: FieldNames, where: Path) -> tuple[str, ...] | None:
    """The names a dataset returns (None: plain tuple samples); an unknown one is refused."""
    if fields is None:
        return None
    available = dataset_fields(index)
    if isinstance(fields, str) and fields != "all":
        raise ValueError(f"fields must be a sequence of names or 'all', not the string "
                         f"{fields!r}: pass fields=({fields!r},)")
    names = available if fields == "all" else tuple(fields)
    for name in names:
        if name not in available:
            listed = ", ".join(available) if available else "none"
            raise ValueError(f"{where}: no field {name!r} in this dataset (its fields: "
                             f"{listed}); pass some of them, or fields='all'")
    return names


def with_fields(sample: tuple[Any, ...], reader: RecordReader, i: int,
                names: tuple[str, ...], specs: tuple[FieldSpec, ...]) -> dict[str, Any]:
    """(image, label[, key]) of sample i as a dict with its fields (`specs`: the
    dataset's, in the index's order)."""
    return with_fields_many([sample], reader, [i], names, specs)[0]


def with_fields_many(samples: Sequence[tuple[Any, ...]], reader: RecordReader,
                     positions: Sequence[int], names: tuple[str, ...],
                     specs: tuple[FieldSpec, ...]) -> Sequence[dict[str, Any]]:
    """A batch of samples (at `positions`) as dicts, their fields read in one call: a
    FieldBatch of columns (readers.batching.field_batch) of the reader's checked byte
    values; plain dicts when no field is asked for."""
    if names:
        return FieldBatch(samples, _columns(reader, positions, names, specs))
    return [_as_dict(sample, {}, names) for sample in samples]


def fields_ahead(reader: RecordReader, positions: Sequence[int], names: tuple[str, ...],
                 specs: tuple[FieldSpec, ...]) -> Callable[[int, tuple[Any, ...]], dict[str, Any]]:
    """Read the fields of samples at `positions` now, in one call; the function returned
    makes the k-th one's dict around its plain sample when it is built (the streaming
    dataset reads a group's fields at once, but decodes images one at a time)."""
    if names:
        return FieldBatch((), _columns(reader, positions, names, specs)).dict_of
    return lambda k, sample: _as_dict(sample, {}, names)


def _columns(reader: RecordReader, positions: Sequence[int], names: tuple[str, ...],
             specs: tuple[FieldSpec, ...]) -> dict[str, Column]:
    values = reader.field_values_many(positions)
    return field_columns(numbered(specs, names), values)


def field_columns(chosen: Sequence[tuple[int, FieldSpec]],
                  values: Sequence[Sequence[bytes | None]]) -> dict[str, Column]:
    """The columns of the chosen fields ((position in the record, spec)) of a batch: an
    array field's numbers joined at once, a json field of plain number lists parsed at
    once, the others value by value."""
    columns: dict[str, Column] = {}
    for number, spec in chosen:
        cells = [sample[number] for sample in values]
        arrays = parse_arrays(cells) if spec.type == "json" and cells else \
            stored_arrays(cells) if spec.type in ("floats", "ints") else None
        if arrays is not None:
            columns[spec.name] = arrays
        elif spec.type == "str":
            columns[spec.name] = [None if cell is None else str(cell, "utf-8", "surrogatepass")
                                  for cell in cells]  # str(): a view decodes without a copy
        else:
            columns[spec.name] = [None if cell is None else natural(decode_value(spec.type, cell))
                                  for cell in cells]
    return columns


def _as_dict(sample: tuple[Any, ...], values: dict[str, object],
             names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"image": sample[0], "label": sample[1]}
    for name in names:
        out[name] = natural(values.get(name))
    if len(sample) > 2:
        out["key"] = sample[2]
    return out


def natural(value: Any) -> Any:
    """A numeric JSON list or numpy array as a tensor (table above); the rest as it is."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value)) if value.dtype.kind in "biuf" else value
    if type(value) is not list:
        return value
    if not value:
        return torch.zeros(0, dtype=torch.float32)
    try:
        array = np.array(value)
    except (ValueError, OverflowError):  # ragged, or ints beyond int64
        return value
    if array.dtype.kind == "f":
        return torch.from_numpy(_float_array(array))
    if array.dtype.kind in "iu":
        return torch.from_numpy(array.astype(np.int64, copy=False))
    return value  # strings, bools, objects, None among them: Python values




def _float_array(array: np.ndarray) -> np.ndarray:
    """float32, unless a finite number would overflow it: then float64, every bit kept.

    Narrowing under np.errstate cost most of a boxes field's conversion, so it is done
    only when some magnitude exceeds float32's largest (`fmax` skips NaN, which a plain
    max would return, hiding a 1e300 beside it).
    """
    if not array.size or not float(np.fmax.reduce(np.abs(array), axis=None)) > FLOAT32_MAX:
        return array.astype(np.float32)
    with np.errstate(over="ignore"):
        narrow = array.astype(np.float32)
    if np.isinf(narrow).any() and (np.isinf(narrow) & np.isfinite(array)).any():
        return array
    return narrow
