"""Sidecar fields of archive members: `x.txt` / `x.json` beside `x.jpg`, as in a folder.

An archive is read as the folder it extracts to, so the sidecars the folder scan takes
as fields (`SIDECARS`) are fields here too. They are collected while the members are
listed and read once the items are sorted, through the same member reader as the images
(tar by offset, .tgz in one forward pass, zip inflated and CRC-checked). A sidecar that
cannot be read as its type (not UTF-8, not JSON) is listed as a reject naming the
member; its image is packed without that field.
"""

from __future__ import annotations

import numpy as np

from packer.core.fields import FieldSpec, FieldValueError, pack_record
from packer.core.record import Reject
from packer.errors import RejectReason
from packer.source.fields import SIDECARS, FieldChoice, bad_sidecar, sidecar_value
from packer.source.items import SourceItems, Strings
from packer.source.members import ArchiveSource, Entry, read_entries

SUFFIX_OF = {spec.name: suffix for suffix, spec in SIDECARS.items()}


class Sidecars:
    """The sidecar members of an archive, by (image key, suffix)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Entry] = {}

    def offer(self, name: str, entry: Entry) -> bool:
        """Keep `name` if it is a sidecar (a regular .txt/.json member)."""
        stem, dot, ext = name.rpartition(".")
        suffix = dot + ext.lower()
        if not dot or suffix not in SIDECARS or entry.kind != "file":
            return False
        self.entries[(stem, suffix)] = entry
        return True

    def used(self, items: SourceItems) -> set[tuple[str, str]]:
        """The sidecars beside an item's image."""
        keys = {items.keys.text(i) for i in range(len(items))} if self.entries else set()
        return {pair for pair in self.entries if pair[0] in keys}

    def fields(self, used: set[tuple[str, str]], choice: FieldChoice,
               where: str) -> tuple[FieldSpec, ...]:
        """The sidecar fields kept: those the archive has, as --fields chooses."""
        seen = {suffix for _, suffix in used}
        found = [spec for suffix, spec in SIDECARS.items() if suffix in seen]
        return choice.chosen(choice.retyped(found, where, fixed=True), where)

    def records(self, archive: ArchiveSource, items: SourceItems, used: set[tuple[str, str]],
                specs: tuple[FieldSpec, ...], rejects: list[Reject]) -> Strings:
        """Each item's fields record, read from its sidecars."""
        wanted = sorted(pair for pair in used if SIDECARS[pair[1]] in specs)
        data = read_entries(archive.path, archive.kind, archive.stat,
                            [self.entries[pair] for pair in wanted])
        values = dict(zip(wanted, data, strict=True))
        records = []
        for i in range(len(items)):
            key = items.keys.text(i)
            row: list[bytes | None] = []
            for spec in specs:
                pair = (key, SUFFIX_OF[spec.name])
                row.append(_value(spec, values.get(pair), archive, pair, rejects))
            records.append(pack_record(row))
        lengths = np.array([len(record) for record in records], np.int64)
        return Strings.joined(iter(records), lengths)


def _value(spec: FieldSpec, raw: bytes | RejectReason | None, archive: ArchiveSource,
           pair: tuple[str, str], rejects: list[Reject]) -> bytes | None:
    """A sidecar's value; a bad one is a reject naming the member (the image stays)."""
    if raw is None:
        return None
    where = f"{archive.path}:{pair[0]}{pair[1]}"
    try:
        if isinstance(raw, RejectReason):
            raise FieldValueError(str(raw))
        return sidecar_value(spec, raw)
    except FieldValueError as exc:
        rejects.append(bad_sidecar(where, spec, exc))
        return None
