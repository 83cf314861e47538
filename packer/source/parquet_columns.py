"""What the columns of a Parquet (or `datasets` Arrow) table are to a conversion.

    image   the column named `image`, else the first the `huggingface` schema metadata
            calls an Image feature, else the first `{bytes, path}` struct column, else
            the first binary column
    label   the column named `label`, else the one column the metadata calls a
            ClassLabel; its class names come from that ClassLabel when it has them
    fields  every other column, typed from its Arrow type: strings -> str, integers
            -> int, floats -> float, binary (and other `{bytes, path}` structs: masks,
            audio) -> bytes, lists of numbers -> floats / ints arrays, dates, times
            and decimals -> str (their text), anything else -> json; pandas' index
            columns (`__index_level_0__`) are left out

The Hugging Face Hub stores datasets this way (`datasets.Dataset.to_parquet`, the
Hub's `data/train-00000-of-00002.parquet`).
"""

from __future__ import annotations

import datetime
import decimal
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packer.core.fields import FieldSpec, FieldType, FieldValueError, encode_value
from packer.errors import SourceError
from packer.source.fields import FieldChoice
from packer.source.parquet_read import ImageColumn, load_pyarrow

IMAGE, LABEL = "image", "label"
PANDAS_INDEX = re.compile(r"__index_level_\d+__")
TEXT_VALUES = (datetime.date, datetime.time, datetime.timedelta, decimal.Decimal)


@dataclass(frozen=True)
class Layout:
    """The image column, the label column (None: there is none) and its ClassLabel names
    (None: the labels name their classes, or are class ids), and the fields kept."""

    image: ImageColumn
    label: str | None
    names: tuple[str, ...] | None
    fields: tuple[FieldSpec, ...]


def layout_of(schema: Any, choice: FieldChoice, where: str) -> Layout:
    """Read a table's schema as a conversion sees it (see the module docstring)."""
    features = hf_features(schema)
    image = image_column(schema, features, where)
    label = label_column(schema, features, image.name)
    names = class_label_names(features.get(label)) if label is not None else None
    columns = [name for name in schema.names
               if name not in (image.name, label) and not PANDAS_INDEX.fullmatch(name)]
    found = [_spec(name, field_type(schema.field(name).type), choice, where)
             for name in columns if _wanted(name, choice)]
    fields = choice.chosen(choice.retyped(found, where), where)
    return Layout(image, label, names, fields)


def hf_features(schema: Any) -> dict[str, Any]:
    """The `datasets` features the schema metadata describes ({} when there are none)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        info = json.loads(raw)["info"] if raw else {}
        features = info.get("features") if isinstance(info, dict) else None
    except (ValueError, KeyError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


def image_column(schema: Any, features: dict[str, Any], where: str) -> ImageColumn:
    """The column of image bytes (see the module docstring)."""
    pa = load_pyarrow(where)
    kinds = {name: _image_kind(pa, schema.field(name).type) for name in schema.names}
    if IMAGE in kinds and kinds[IMAGE] is None:
        raise SourceError(f"{where}: column 'image' holds {schema.field(IMAGE).type}, not "
                          "image bytes; store the encoded images (binary, or {bytes, path} "
                          "structs as datasets' Image feature writes them)")
    tagged = [name for name in schema.names if _feature_type(features.get(name)) == "Image"]
    structs = [name for name, kind in kinds.items() if kind == "struct"]
    binary = [name for name, kind in kinds.items() if kind == "binary"]
    for name in ([IMAGE] if IMAGE in kinds else []) + tagged + structs + binary:
        if kinds[name] is not None:
            return ImageColumn(name, kinds[name] == "struct")
    raise SourceError(f"{where}: no column of image bytes (columns: "
                      f"{', '.join(schema.names) or 'none'}); store the encoded images in a "
                      "binary column or as {bytes, path} structs (datasets' Image feature)")


def _image_kind(pa: Any, kind: Any) -> str | None:
    """"binary", "struct" ({bytes, path}) or None for a column that holds no image bytes."""
    if _is_binary(pa, kind):
        return "binary"
    if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0 \
            and _is_binary(pa, kind.field("bytes").type):
        return "struct"
    return None


def _is_binary(pa: Any, kind: Any) -> bool:
    binary_view = getattr(pa.types, "is_binary_view", lambda _: False)
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                or binary_view(kind))


def label_column(schema: Any, features: dict[str, Any], image: str) -> str | None:
    """`label`, else the one ClassLabel column, else None."""
    if LABEL in schema.names:
        return LABEL
    tagged = [name for name in schema.names if name != image
              and _feature_type(features.get(name)) == "ClassLabel"]
    return tagged[0] if len(tagged) == 1 else None


def class_label_names(feature: object) -> tuple[str, ...] | None:
    """The class names of a ClassLabel feature, or None."""
    if _feature_type(feature) != "ClassLabel" or not isinstance(feature, dict):
        return None
    names = feature.get("names")
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        return tuple(names)
    return None


def _feature_type(feature: object) -> object:
    return feature.get("_type") if isinstance(feature, dict) else None


def field_type(kind: Any) -> FieldType:
    """The field type of a column of this Arrow type (see the module docstring)."""
    pa = load_pyarrow("a Parquet column")
    types = pa.types
    if types.is_dictionary(kind):
        kind = kind.value_type
    if types.is_string(kind) or types.is_large_string(kind) \
            or getattr(types, "is_string_view", lambda _: False)(kind):
        return "str"
    if types.is_integer(kind):
        return "int"
    if types.is_floating(kind):
        return "float"
    if _is_binary(pa, kind) or types.is_fixed_size_binary(kind) or _image_kind(pa, kind):
        return "bytes"
    if types.is_temporal(kind) or types.is_decimal(kind):
        return "str"
    leaf = kind
    while types.is_list(leaf) or types.is_large_list(leaf) or types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
    if leaf is not kind and types.is_floating(leaf):
        return "floats"
    if leaf is not kind and types.is_integer(leaf):
        return "ints"
    return "json"


def _wanted(name: str, choice: FieldChoice) -> bool:
    return choice.enabled and (choice.keep is None or name in choice.keep
                               or any(spec.name == name for spec in choice.types))


def _spec(name: str, kind: FieldType, choice: FieldChoice, where: str) -> FieldSpec:
    try:
        return FieldSpec(name, kind)
    except ValueError as exc:
        raise SourceError(f"{where}: column {name!r} cannot be a field ({exc}); keep the "
                          "others with --fields A,B, or none with --no-fields") from exc


def cell_bytes(kind: FieldType, value: object) -> bytes | None:
    """The byte form of one cell as a `kind` field (None: no value); FieldValueError
    when it is not one."""
    if value is None:
        return None
    if isinstance(value, dict) and kind == "bytes":  # a {bytes, path} struct
        value = value.get("bytes")
        if value is None:
            return None
    if isinstance(value, TEXT_VALUES) or (kind == "str" and isinstance(value, int | float)):
        value = str(value)
    return encode_value(kind, value)


def row_records(specs: Sequence[FieldSpec], columns: Sequence[list[Any]],
                row: int) -> list[bytes | None]:
    """The byte forms of row `row`'s fields; FieldValueError names the column."""
    values: list[bytes | None] = []
    for spec, column in zip(specs, columns, strict=True):
        try:
            values.append(cell_bytes(spec.type, column[row]))
        except FieldValueError as exc:
            raise FieldValueError(f"column {spec.name!r} ({spec.type}): {exc}") from exc
    return values
