"""Per-sample fields in the datasets' samples: `fields=("caption", "boxes")` or "all".

With fields a sample is a dict, `{"image", "label", <fields>}` (+ "key" with
`with_keys=True`), that `default_collate` and `readers.collate` batch (the latter pads
ragged arrays: `collate_dicts`); without, it stays `(image, label[, key])`.

Values come from a FieldSource a batch at a time: by default the format's record
reader (ReadFields: `field_values_many`, every sample's values in byte form checked
against its digest, in the process that reads), decoded column by column into a
`Batch` of columns that `readers.collate` batches at once, with
nothing held between batches; with `fields_in_memory=True`, columns read and checked
once and held (`HeldFields`), which give the same values. Numeric values become
arrays on the way out, the same on every path:

    JSON list of numbers (nested, rectangular)   tensor: float32 if any number is a
                                                 float (boxes (n, 4)), float64 if one
                                                 overflows float32 (1e300), else int64
    empty JSON list                              float32 tensor of shape (0,)
    numpy array (a numeric npy field)            tensor of its dtype
    floats / ints field (an array field)         float32 / int64 tensor of the stored
                                                 shape, (0, 4) and (1, 0) included
    anything else (str, int, float, bool, dict,  unchanged: floats stay Python floats,
    bytes, lists of strings, None when missing)  bit-exact

A padding sample (PaddedIndex, label PAD_LABEL) is a repeat of a real one and keeps its
fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch

from packer.core.field_arrays import FLOAT32_MAX
from packer.core.fields import FieldSpec, decode_value, numbered
from packer.core.index import Index
from packer.formats.base import RecordReader
from readers.batching._number_arrays import parse_arrays, stored_arrays
from readers.batching.batch import Batch
from readers.batching.fields_collate import Column

FieldNames = Sequence[str] | Literal["all"] | None

__all__ = ["FieldNames", "FieldSource", "ReadFields", "chosen_fields", "fields_ahead", "natural",
           "with_fields", "with_fields_many"]


def dataset_fields(index: Index) -> tuple[str, ...]:
    return tuple(spec.name for spec in index.fields)


def chosen_fields(index: Index, fields: str | Sequence[str], where: Path) -> tuple[str, ...]:
    """The names a dataset returns for `fields=` ("all" or names); an unknown one is
    refused."""
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


class FieldSource(Protocol):
    """Where a batch's field columns come from: the format's reader (ReadFields), or the
    columns held in memory (`HeldFields`)."""

    def columns(self, positions: Sequence[int], names: tuple[str, ...]) -> dict[str, Column]:
        """The columns of fields `names` of the samples at `positions`, every value
        checked against its sample's digest (when read, or when held)."""
        ...


@dataclass(frozen=True)
class ReadFields:
    """A batch's fields read from the format's record reader in one call
    (`field_values_many`, every sample checked against its digest), then decoded a
    column at a time. `specs`: the dataset's fields, in the index's order."""

    reader: RecordReader
    specs: tuple[FieldSpec, ...]

    def columns(self, positions: Sequence[int], names: tuple[str, ...]) -> dict[str, Column]:
        return field_columns(numbered(self.specs, names),
                             self.reader.field_values_many(positions))


def with_fields(sample: tuple[Any, ...], source: FieldSource, i: int,
                names: tuple[str, ...]) -> dict[str, Any]:
    """(image, label[, key]) of sample i as a dict with its fields."""
    return with_fields_many([sample], source, [i], names)[0]


def with_fields_many(samples: Sequence[tuple[Any, ...]], source: FieldSource,
                     positions: Sequence[int], names: tuple[str, ...]
                     ) -> Sequence[dict[str, Any]]:
    """A batch of samples (at `positions`) as dicts, their fields taken in one call: a
    `Batch` with field columns; plain dicts when no field is asked for."""
    if names:
        columns = source.columns(positions, names)
        return samples.with_fields(columns) if isinstance(samples, Batch) \
            else Batch(samples, fields=columns)
    return [_as_dict(sample, {}, names) for sample in samples]


def fields_ahead(source: FieldSource, positions: Sequence[int], names: tuple[str, ...]
                 ) -> Callable[[int, tuple[Any, ...]], dict[str, Any]]:
    """Take the fields of samples at `positions` now, in one call; the function returned
    makes the k-th one's dict around its plain sample when it is built (the streaming
    dataset reads a group's fields at once, but decodes images one at a time)."""
    if names:
        return Batch((), fields=source.columns(positions, names)).dict_of
    return lambda k, sample: _as_dict(sample, {}, names)


def field_columns(chosen: Sequence[tuple[int, FieldSpec]],
                  values: Sequence[Sequence[bytes | None]]) -> dict[str, Column]:
    """The columns of the chosen fields ((position in the record, spec)) of a batch."""
    return {spec.name: field_column(spec, [sample[number] for sample in values])
            for number, spec in chosen}


def field_column(spec: FieldSpec, cells: Sequence[bytes | None]) -> Column:
    """One field of a batch from its values in byte form (None: no value): an array
    field's numbers joined at once, a json field of plain number lists parsed at once,
    the others value by value."""
    arrays = parse_arrays(cells) if spec.type == "json" and cells else \
        stored_arrays(cells) if spec.type in ("floats", "ints") else None
    if arrays is not None:
        return arrays
    if spec.type == "str":  # str(): a view decodes without a copy
        return [None if cell is None else str(cell, "utf-8", "surrogatepass") for cell in cells]
    return [None if cell is None else natural(decode_value(spec.type, cell)) for cell in cells]


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

    Narrowing under np.errstate is the costly part of the conversion, so it is done
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
