"""Scan a CSV or JSONL manifest: `path,label` rows, and per-sample fields beside them.

CSV: a header row naming `path` and `label` (other columns are fields, str unless
--field types them); JSONL: one object a line with `path` and `label` keys. Labels are
class names (sorted into class ids) or integer ids. Paths are relative to the manifest's
folder unless absolute; the key is the path relative to it, without the extension.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from packer.core.fields import FieldSpec, FieldType, FieldValueError, finite_float
from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.fields import (
    STANDARD_COLUMNS,
    FieldChoice,
    csv_record,
    csv_specs,
    json_record,
    widened,
)
from packer.source.items import ItemsBuilder
from packer.source.kinds import Source

MAX_CLASSES = 1_000_000


def key_of(relative: str) -> str:
    """The stable key of a file: relative posix path without the extension."""
    pure = PurePosixPath(relative)
    return str(pure.with_suffix("")) if pure.suffix else str(pure)


def read_manifest(manifest: Path, choice: FieldChoice) -> Source:
    """The items, class names, rejects and fields of a manifest of `path,label` rows (and
    fields beside them); labels are class names or integers.

    A few passes over the rows (class names, field types, items), so no list of rows
    is kept.
    """
    root = manifest.parent
    class_names = _class_names(manifest)
    specs = _manifest_specs(manifest, choice)
    lookup = {name: i for i, name in enumerate(class_names)}
    found = ItemsBuilder("")
    rejects: list[Reject] = []
    csv_rows = manifest.suffix.lower() == ".csv"
    for number, path_text, label_text, extras in _read_manifest_rows(manifest):
        full = path_text if os.path.isabs(path_text) else os.path.join(root, path_text)
        label = _label_of(label_text, lookup, len(class_names))
        if label is None:
            rejects.append(Reject(-1, full, f"unknown class {label_text!r} in the manifest"))
            continue
        record = b""
        if specs:
            try:
                record = csv_record(specs, extras, str(root)) if csv_rows \
                    else json_record(specs, extras)
            except FieldValueError as exc:
                rejects.append(Reject(-1, full, f"bad field in {manifest}, line {number}: "
                                                f"{exc}"))
                continue
        found.add(key_of(os.path.relpath(full, root).replace(os.sep, "/")), full, label, record)
    return Source(root, found.build(rejects), class_names, rejects, fields=specs)


def _manifest_specs(manifest: Path, choice: FieldChoice) -> tuple[FieldSpec, ...]:
    """The fields of a manifest: its CSV columns, or its JSONL keys typed by their values."""
    if not choice.enabled:
        return ()
    if manifest.suffix.lower() == ".csv":
        with open(manifest, encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), [])
        _check_header(manifest, header)
        return csv_specs(header, choice, str(manifest))
    types: dict[str, FieldType | None] = {}
    for _, _, _, extras in _read_manifest_rows(manifest):
        for name, value in extras.items():
            types[name] = widened(types.get(name), value)
    try:
        found = [FieldSpec(name, kind or "json") for name, kind in types.items()]
    except ValueError as exc:  # a key that is not a field name
        raise FieldValueError(f"{manifest}: {exc}, or pass --fields to choose the keys "
                              "to keep or --no-fields") from exc
    return choice.chosen(choice.retyped(found, str(manifest)), str(manifest))


def _check_header(manifest: Path, header: Sequence[str]) -> None:
    """Refuse a CSV header that names a column twice: its cells would be one field, or
    the last `path` or `label` would win without a word."""
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise SourceError(f"{manifest}: the header row names column {repeated[0]!r} more "
                          "than once; give each column its own name")


def _read_manifest_rows(manifest: Path) -> Iterable[tuple[int, str, str, dict[str, Any]]]:
    """(line number, path, label, the row's other cells or keys) of each row."""
    try:
        text = manifest.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"{manifest}: cannot read the manifest ({exc})") from exc
    if manifest.suffix.lower() == ".csv":
        # Not splitlines(): it also splits at \f, \x1c, \u2028 ..., which file names
        # may hold, and breaks quoted fields that span lines.
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames or not {"path", "label"} <= set(reader.fieldnames):
            raise SourceError(f"{manifest}: the header row must name `path` and `label` columns")
        _check_header(manifest, reader.fieldnames)
        for row in reader:
            if None in row or None in row.values():  # DictReader's mark of a short/long row
                raise SourceError(f"{manifest}:{reader.line_num}: the row has "
                                  f"{'more' if None in row else 'fewer'} cells than the "
                                  f"header's {len(reader.fieldnames)} columns; give every "
                                  "row one cell a column (quote a cell that holds a comma)")
            extras = {k: v for k, v in row.items() if k not in STANDARD_COLUMNS}
            yield reader.line_num, str(row["path"]).strip(), str(row["label"]).strip(), extras
        return
    for number, line in enumerate(text.split("\n"), start=1):  # JSON strings may hold \u2028
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_float=finite_float)
            label = obj["label"]
            extras = {k: v for k, v in obj.items() if k not in STANDARD_COLUMNS}
            yield number, str(obj["path"]), "" if label is None else str(label), extras
        except FieldValueError as exc:
            raise SourceError(f"{manifest}:{number}: {exc}") from exc
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise SourceError(
                f"{manifest}:{number}: each line must be a JSON object with `path` and `label`"
            ) from exc


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _class_names(manifest: Path) -> tuple[str, ...]:
    """Named labels: the sorted names. All-integer labels: "0" .. str(max)."""
    names: set[str] = set()
    top, all_int, any_row = -1, True, False
    for _, _, label, _ in _read_manifest_rows(manifest):
        any_row = True
        if _is_int(label):
            top = max(top, int(label))
        else:
            all_int = False
            if label:
                names.add(label)
    if any_row and all_int:
        if top >= MAX_CLASSES:  # one name per id: a stray big number would exhaust memory
            raise SourceError(
                f"{manifest}: integer label {top} is not a class id (labels are 0..C-1, "
                f"C at most {MAX_CLASSES}); fix the label column or use class names"
            )
        return tuple(str(i) for i in range(top + 1))
    return tuple(sorted(names))


def _label_of(text: str, lookup: dict[str, int], num_classes: int) -> int | None:
    """An integer label is a class id; any other text must be a known class name."""
    if _is_int(text):
        value = int(text)
        return value if 0 <= value < num_classes else None
    return lookup.get(text)
