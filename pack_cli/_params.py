"""Option values the commands parse: byte sizes (256MB, 1GiB), image sizes (HxW), fields,
storage options (KEY=VALUE)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import click

from packer.core.fields import parse_spec
from packer.source.fields import FieldChoice
from packer.source.wds_labels import LabelChoice

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30}


def parse_bytes(text: str) -> int:
    """'256MB' -> 256000000; plain numbers are bytes; fractions round to whole bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in UNITS:
        raise click.BadParameter(f"{text!r} is not a size like 256MB, 1GiB or 1000000")
    return int((Decimal(match.group(1)) * UNITS[unit]).to_integral_value(ROUND_HALF_UP))


def parse_fields(types: tuple[str, ...], keep: str | None, none: bool,
                 annotations: Path | None = None, label: str | None = None) -> FieldChoice:
    """--field NAME:TYPE (repeatable), --fields a,b, --no-fields, --annotations and
    --label as a FieldChoice."""
    try:
        names = tuple(n.strip() for n in keep.split(",") if n.strip()) if keep is not None \
            else None
        if label is not None:
            LabelChoice.parse(label)  # refused here, before anything is scanned
        return FieldChoice(keep=names, enabled=not none,
                           types=tuple(parse_spec(text) for text in types),
                           annotations=None if annotations is None else str(annotations),
                           label=label)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def parse_size(text: str | None) -> tuple[int, int] | None:
    """'224x224' -> (224, 224); a single number means a square."""
    if text is None:
        return None
    parts = text.lower().split("x")
    if len(parts) not in (1, 2) or not all(re.fullmatch("[0-9]+", p) and int(p) > 0
                                           for p in parts):
        raise click.BadParameter(f"{text!r} is not a size like 256x256 (height x width)")
    return int(parts[0]), int(parts[-1])


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """['endpoint_url=http://host:9000', 'anon=false', 'client_kwargs.region_name=x'] -> dict.

    A value that parses as JSON is taken as JSON (true, 8, {"a": 1}, "quoted text"), any
    other as text; a dotted key fills a nested dict.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"storage option {pair!r} is not KEY=VALUE")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        *parents, last = key.strip().split(".")
        node = options
        for name in parents:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise ValueError(f"storage option {pair!r}: {name} is already a value")
            node = child
        node[last] = value
    return options
