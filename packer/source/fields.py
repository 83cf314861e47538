"""Where a scan finds per-sample fields, and which it keeps.

    CSV manifest     every column but path and label; str unless --field NAME:TYPE
                     says int, float, json (the cell is JSON text) or bytes (the cell
                     names a file, relative to the manifest, whose bytes are stored);
                     an empty cell is no value
    JSONL manifest   every key but path and label, typed from its JSON values over
                     the whole manifest: all strings -> str, all integers -> int, all
                     numbers -> float, anything else (bools, lists, objects, mixed)
                     -> json; null or a missing key is no value
    image folder     sidecars beside an image: `x.txt` (field `txt`, str) and `x.json`
                     (field `json`, parsed JSON), the webdataset / img2dataset convention
    packed dataset   its fields, as its index names them

A cell that cannot be read as its field's type is a reject whose reason names the
manifest, the row and the column (or the sidecar file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packer.core.fields import (
    FieldSpec,
    FieldType,
    FieldValueError,
    encode_value,
    pack_record,
    parse_text,
    unpack_record,
)
from packer.core.record import Reject

SIDECARS = {".txt": FieldSpec("txt", "str"), ".json": FieldSpec("json", "json")}
STANDARD_COLUMNS = ("path", "label")


@dataclass(frozen=True)
class FieldChoice:
    """Which fields a conversion takes from its source (the CLI's --fields, --no-fields,
    --field NAME:TYPE)."""

    keep: tuple[str, ...] | None = None  # only these, in this order (None: every field)
    enabled: bool = True  # False: no fields at all
    types: tuple[FieldSpec, ...] = ()  # the types of CSV columns that are not str
    # A COCO-style annotations file whose boxes, categories, ... become the fields of
    # an image folder's images (the COCO source; the CLI's --annotations)
    annotations: str | None = None
    # Where a WebDataset sample's label comes from: cls, json:KEY or none (the CLI's
    # --label; `LabelChoice`); None: `.cls` when the shards have it
    label: str | None = None

    def __post_init__(self) -> None:
        if not self.enabled and self.keep:
            raise ValueError("--fields and --no-fields exclude each other")

    def type_of(self, name: str, default: FieldType = "str") -> FieldType:
        for spec in self.types:
            if spec.name == name:
                return spec.type
        return default

    def retyped(self, found: Sequence[FieldSpec], where: str,
                fixed: bool = False) -> list[FieldSpec]:
        """`found` with the types --field gives them. A --field naming no field of the
        source is an error, not ignored (a typo would leave the field as it was); so is
        one that changes a type the source fixes (`fixed`: an image folder's sidecars)."""
        if not self.enabled:
            return list(found)
        by_name = {spec.name: spec for spec in found}
        for spec in self.types:
            if spec.name not in by_name:
                known = ", ".join(by_name) or "none"
                raise FieldValueError(f"{where}: --field names {spec.name!r}, which the "
                                      f"source does not have (its fields: {known})")
            if fixed and by_name[spec.name] != spec:
                raise FieldValueError(f"{where}: --field {spec.name}:{spec.type} does not "
                                      f"apply: the sidecar field {spec.name!r} is "
                                      f"{by_name[spec.name].type}; drop --field")
        return [FieldSpec(spec.name, self.type_of(spec.name, spec.type)) for spec in found]

    def chosen(self, found: Sequence[FieldSpec], where: str) -> tuple[FieldSpec, ...]:
        """The fields kept of those the source has; an unknown name in --fields is an error."""
        if not self.enabled:
            return ()
        if self.keep is None:
            return tuple(found)
        by_name = {spec.name: spec for spec in found}
        missing = [name for name in self.keep if name not in by_name]
        if missing:
            known = ", ".join(by_name) or "none"
            raise FieldValueError(f"{where}: no field {', '.join(map(repr, missing))} in the "
                                  f"source (its fields: {known}); fix --fields")
        return tuple(by_name[name] for name in self.keep)


def csv_specs(columns: Sequence[str], choice: FieldChoice, where: str) -> tuple[FieldSpec, ...]:
    """The fields of a CSV manifest's header."""
    extra = [name for name in columns if name not in STANDARD_COLUMNS]
    unknown = [spec.name for spec in choice.types if spec.name not in extra]
    if unknown and choice.enabled:
        raise FieldValueError(f"{where}: --field names column {unknown[0]!r}, which the "
                              "manifest does not have")
    try:
        found = [FieldSpec(name, choice.type_of(name)) for name in extra]
    except ValueError as exc:
        raise FieldValueError(f"{where}: {exc}") from exc
    return choice.chosen(found, where)


def widened(current: FieldType | None, value: object) -> FieldType | None:
    """A JSONL key's type so far, after one more value (see the module docstring)."""
    if value is None:
        return current
    if isinstance(value, str):
        kind: FieldType = "str"
    elif isinstance(value, int) and not isinstance(value, bool) and \
            -(1 << 63) <= value < 1 << 63:
        kind = "int"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        kind = "float"
    else:
        return "json"
    if current is None or current == kind:
        return kind
    return "float" if {current, kind} == {"int", "float"} else "json"


def repacked(record: bytes, count: int, keep: Sequence[int]) -> bytes:
    """A fields record of `count` values cut down to the values at `keep`."""
    values = unpack_record(record, count)
    return pack_record([values[n] for n in keep])


def csv_record(specs: Sequence[FieldSpec], cells: Mapping[str, str | None],
               root: str) -> bytes:
    """A CSV row's fields record; FieldValueError names the column."""
    values: list[bytes | None] = []
    for spec in specs:
        cell = cells.get(spec.name)
        if cell is None or cell == "":
            values.append(None)
            continue
        try:
            values.append(_file_bytes(cell, root) if spec.type == "bytes"
                          else parse_text(spec.type, cell))
        except FieldValueError as exc:
            raise FieldValueError(f"column {spec.name!r} ({spec.type}): {exc}") from exc
    return pack_record(values)


def _file_bytes(cell: str, root: str) -> bytes:
    path = cell.strip() if os.path.isabs(cell.strip()) else os.path.join(root, cell.strip())
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise FieldValueError(f"cannot read {path} ({exc.strerror or exc})") from exc


def json_record(specs: Sequence[FieldSpec], obj: Mapping[str, object]) -> bytes:
    """A JSONL line's fields record; FieldValueError names the key."""
    values: list[bytes | None] = []
    for spec in specs:
        value = obj.get(spec.name)
        try:
            values.append(None if value is None else encode_value(spec.type, value))
        except FieldValueError as exc:
            raise FieldValueError(f"key {spec.name!r} ({spec.type}): {exc}") from exc
    return pack_record(values)


def sidecar_record(image_path: str, present: Mapping[str, str], rejects: list[Reject]
                   ) -> bytes:
    """The fields record (txt, json: SIDECARS) of an image from the sidecars beside it
    (`present`: each suffix found, to the suffix as its file has it: `.txt` -> `.TXT`); a
    sidecar that cannot be read or parsed is a reject, and the image is packed without it."""
    stem = image_path[: image_path.rfind(".")]
    values: list[bytes | None] = []
    for suffix, spec in SIDECARS.items():
        value = None
        if suffix in present:
            path = stem + present[suffix]
            try:
                with open(path, "rb") as handle:
                    value = sidecar_value(spec, handle.read())
            except (OSError, FieldValueError) as exc:
                rejects.append(bad_sidecar(path, spec, exc))
        values.append(value)
    return pack_record(values)


def bad_sidecar(where: str, spec: FieldSpec, exc: Exception) -> Reject:
    """The reject of a sidecar that cannot be read or parsed; its image is still packed."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return Reject(-1, where, f"bad sidecar, its image is packed without the {spec.name!r} "
                             f"field: {reason}")


def sidecar_value(spec: FieldSpec, raw: bytes) -> bytes:
    """A sidecar's bytes as its field's value: UTF-8 text, or JSON text parsed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldValueError(f"not UTF-8 text ({exc})") from exc
    return parse_text(spec.type, text) if spec.type == "json" else encode_value("str", text)
