"""The source records of a dataset's keys, encoded as its conversion encoded them.

`pack verify --repair` rebuilds damaged shards from these: the source is scanned as
`convert` scans it, each asked key is found by key, and it is encoded with the options
index.json's `extra["job"]` recorded, so an unchanged source gives the packed bytes back
exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from packer.conversion.identity import JOB_KEY
from packer.conversion.job import source_open
from packer.core.index import Index
from packer.core.record import Record
from packer.encode import EncodeOptions, encode_item
from packer.errors import PackError
from packer.source.fields import FieldChoice
from packer.source.scan import scan

__all__ = ["recorded_fields", "recorded_options", "source_records"]


def recorded_options(index: Index, folder: Path) -> EncodeOptions:
    """The EncodeOptions the conversion of `index` ran with, from its job record."""
    job = index.extra.get(JOB_KEY)
    settings = job.get("settings") if isinstance(job, dict) else None
    if not isinstance(settings, dict) or not isinstance(settings.get("encode"), dict):
        raise PackError(f"{folder}: index.json records no conversion settings (an older "
                        "dataset); reconvert instead of repairing")
    names = {item.name for item in dataclasses.fields(EncodeOptions)}
    encode: dict[str, Any] = {k: v for k, v in settings["encode"].items() if k in names}
    if encode.get("size") is not None:
        encode["size"] = tuple(encode["size"])
    return EncodeOptions(**encode)


def recorded_fields(index: Index, annotations: Path | None) -> FieldChoice:
    """The fields the conversion took, with their types, as a scan's choice."""
    label = index.extra[JOB_KEY]["settings"].get("label")
    return FieldChoice(keep=tuple(spec.name for spec in index.fields) or None,
                       enabled=bool(index.fields), types=index.fields,
                       annotations=None if annotations is None else str(annotations),
                       label=label if isinstance(label, str) else None)


def source_records(src: Path, index: Index, folder: Path | None = None,
                   annotations: Path | None = None) -> Callable[[Sequence[str]], list[Record]]:
    """A function from keys to their encoded source records (PackError naming the first
    key the source lacks or cannot encode). `annotations`: the COCO file of the
    conversion, where it had one."""
    options = recorded_options(index, folder or src)
    source = scan(src, recorded_fields(index, annotations))
    positions = {key: j for j, (key, _, _) in enumerate(source.items.rows())}

    def records_for(keys: Sequence[str]) -> list[Record]:
        records: list[Record] = []
        with source_open(source):
            for key in keys:
                if key not in positions:
                    raise PackError(f"{src}: no item with key {key!r}; restore it in the "
                                    "source, or reconvert")
                record = encode_item(source.items[positions[key]], options)
                if not isinstance(record, Record):
                    raise PackError(f"{src}: the item for key {key!r} cannot be encoded "
                                    f"({record.reason}); restore it, or reconvert")
                records.append(record)
        return records

    return records_for
