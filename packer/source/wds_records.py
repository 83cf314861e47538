"""The fields of WebDataset samples: one per member extension, found as shards are read.

A sample's fields record is packed as its shard is scanned, over the fields seen so
far (a field first met in a later shard is simply absent from earlier records); once
every shard is read the records are laid out again over the final fields, in name
order, cut to those --fields keeps.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping

from packer.core.fields import (
    RESERVED,
    FieldSpec,
    FieldType,
    FieldValueError,
    encode_value,
    pack_record,
    parse_text,
)
from packer.source.fields import FieldChoice

NOT_NAME = re.compile(r"[^A-Za-z0-9_]")
LENGTH = struct.Struct("<q")
TEXT_EXTENSIONS = frozenset({"txt", "text", "caption"})


def field_name(ext: str) -> str:
    """A field name for a member extension: `seg.png` -> `seg_png`, `2d` -> `f_2d`."""
    name = NOT_NAME.sub("_", ext)[:60]
    if not name or name[0].isdigit():
        name = "f_" + name
    if name in RESERVED or name.endswith("_lengths"):
        name += "_"
    return name


class FieldNames:
    """The fields met so far, by member extension, in the order first met."""

    def __init__(self) -> None:
        self.by_ext: dict[str, FieldSpec] = {}

    def record(self, members: Mapping[str, bytes]) -> bytes:
        """The fields record of one sample over the fields met so far."""
        values: dict[str, bytes] = {}
        for ext, raw in members.items():
            kind, value = _field_value(ext, raw)
            if ext not in self.by_ext:
                self.by_ext[ext] = FieldSpec(self._unique(field_name(ext)), kind)
            values[ext] = value
        return pack_record([values.get(ext) for ext in self.by_ext])

    def _unique(self, name: str) -> str:
        taken = {spec.name for spec in self.by_ext.values()}
        number, base = 2, name
        while name in taken:
            name, number = f"{base}_{number}", number + 1
        return name

    def remapper(self, chosen: tuple[FieldSpec, ...]) -> Callable[[bytes], bytes] | None:
        """What lays a record out over the chosen fields; None: no fields."""
        if not chosen:
            return None
        order = list(self.by_ext.values())
        keep = [order.index(spec) for spec in chosen]

        def remap(record: bytes) -> bytes:
            values = _values(record)
            return pack_record([values[n] if n < len(values) else None for n in keep])
        return remap


def final_specs(names: FieldNames, choice: FieldChoice, where: str) -> tuple[FieldSpec, ...]:
    """The fields kept, in name order (--fields keeps its own order)."""
    found = sorted(names.by_ext.values(), key=lambda spec: spec.name)
    return choice.chosen(choice.retyped(found, where, fixed=True), where)


def _values(record: bytes) -> list[bytes | None]:
    """The values of a record packed over however many fields it was packed with."""
    values: list[bytes | None] = []
    at = 0
    while at < len(record):
        (length,) = LENGTH.unpack_from(record, at)
        at += LENGTH.size
        if length < 0:
            values.append(None)
            continue
        values.append(record[at : at + length])
        at += length
    return values


def _field_value(ext: str, raw: bytes) -> tuple[FieldType, bytes]:
    """A field's type and byte form, from its member's extension and bytes."""
    if ext in TEXT_EXTENSIONS:
        try:
            return "str", encode_value("str", raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise FieldValueError(f"the .{ext} member is not UTF-8 text ({exc})") from exc
    if ext == "json":
        try:
            return "json", parse_text("json", raw.decode("utf-8"))
        except (UnicodeDecodeError, FieldValueError) as exc:
            raise FieldValueError(f"the .json member is not JSON ({exc})") from exc
    return "bytes", raw
