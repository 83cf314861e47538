"""What an append adds: the inputs of SRC whose keys DST does not hold, with DST's labels.

Keys DST already holds are checked, not re-packed: when DST stores the original files,
the file's digest must equal the stored sample's (else the input is a reject naming the
file and the key); in every case its label and its field values must be the same.
With `replace`, such an input replaces the sample at its index instead. New class
names extend DST's label map at the end, so no existing label moves. SRC's fields are
matched to DST's (`field_order`): each record is in DST's order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packer.conversion.append.fields import Reorder, field_order
from packer.conversion.append.held import Existing, Held, Renumbered
from packer.conversion.identity import JOB_KEY
from packer.core.index import INDEX_NAME, Index, SampleTable, open_dataset
from packer.core.record import Reject, SourceItem
from packer.encode import EncodeOptions
from packer.formats.base import ShardOptions
from packer.source.fields import FieldChoice
from packer.source.kinds import Source
from packer.source.packed import read_rejects, stores_original
from packer.source.scan import scan

# The EncodeOptions a user may pass to `pack append`: each must equal DST's own.
OPTION_FLAGS = {"check": "--check", "resize": "--resize", "size": "--size", "fit": "--fit",
                "codec": "--encode", "quality": "--quality", "upscale": "--upscale"}


@dataclass
class AppendPlan:
    """DST as it is, and what the append adds to it."""

    folder: Path
    index: Index
    table: SampleTable
    source: Source
    items: list[SourceItem]  # the new inputs, positions 0..n-1, labels DST's
    class_names: tuple[str, ...]  # DST's, then the new ones
    conflicts: list[Reject]  # inputs whose key DST holds with other bytes or label
    old_rejects: list[Reject]  # DST's rejects.jsonl
    options: EncodeOptions
    shards: ShardOptions
    fingerprint: str
    replacing: list[SourceItem] = field(default_factory=list)  # numbered 0..r-1, DST's labels
    replaced: list[int] = field(default_factory=list)  # the DST sample each one replaces
    drop_duplicates: bool = False  # a new input with the bytes of a sample is a reject

    @property
    def new_classes(self) -> tuple[str, ...]:
        return self.class_names[len(self.index.class_names) :]


def stored_options(index: Index, asked: dict[str, Any]) -> EncodeOptions:
    """DST's encode options; a given option that differs is refused, naming both values."""
    stored = {name: index.encode[name] for name in
              (f.name for f in dataclasses.fields(EncodeOptions)) if name in index.encode}
    if stored.get("size") is not None:
        stored["size"] = tuple(stored["size"])
    for name, value in asked.items():
        if value is not None and value != stored.get(name):
            raise ValueError(f"{OPTION_FLAGS[name]} {_word(value)} conflicts with DST's "
                             f"{_word(stored.get(name))}: an append stores new samples as "
                             "the dataset does; drop the option")
    return EncodeOptions(**stored)


def _word(value: Any) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    return "none" if value is None else str(value)


def shard_options(index: Index) -> ShardOptions:
    """The shard limits DST was converted with (its job record), else the defaults."""
    job = index.extra.get(JOB_KEY)
    shards = job.get("settings", {}).get("shards") if isinstance(job, dict) else None
    if isinstance(shards, dict):
        return ShardOptions(int(shards.get("max_bytes", ShardOptions.max_bytes)),
                            shards.get("max_samples"))
    return ShardOptions()


def plan_append(src: Path, dst: Path, asked: dict[str, Any], existing: Existing = "size",
                fields: FieldChoice | None = None, replace: bool = False,
                drop_duplicates: bool = False) -> AppendPlan:
    """Open DST, scan SRC and sort its inputs into new ones, replacements and conflicts
    (the options are `append`'s)."""
    if existing not in ("size", "digest"):
        raise ValueError(f"existing must be size or digest, not {existing!r}")
    index, table = open_dataset(dst)
    options = stored_options(index, asked)
    source = scan(src, fields or FieldChoice())
    reorder = field_order(index.fields, source.fields, src, dst)
    names = list(index.class_names)
    mapping = [_label_for(name, names) for name in source.class_names]
    held = Held(table, existing if stores_original(index) and source.origin is None
                and source.archive is None else None)
    new, replacing = _Picked(source, reorder), _Picked(source, reorder)
    replaced: list[int] = []
    conflicts: list[Reject] = []
    for item in source.items:
        label = mapping[item.label]
        i = held.positions.get(item.key)
        if i is None:
            new.add(item, label)
            continue
        # a packed SRC's fields are read with its samples; the scan gives every other's
        fields_record = reorder(item.fields) if source.origin is None else b""
        if (problem := held.conflict(item, label, fields_record, i)) is None:
            continue
        if replace:
            replacing.add(item, label)
            replaced.append(i)
        else:
            conflicts.append(Reject(item.position, item.path,
                                    f"key {item.key!r} is already in {dst} {problem}; "
                                    "rename the file, append with --replace, or "
                                    "convert the union instead"))
    shards = shard_options(index)
    settings = {"format": index.format, "encode": options.to_json(),
                "shards": dataclasses.asdict(shards), "drop_duplicates": drop_duplicates}
    fingerprint = _fingerprint(dst, [*new.items, *replacing.items], replaced, settings)
    return AppendPlan(dst, index, table, source, new.items, tuple(names), conflicts,
                      read_rejects(dst), options, shards, fingerprint, replacing.items,
                      replaced, drop_duplicates)


class _Picked:
    """The inputs of one staging, numbered 0..n-1; a packed or archive SRC is read by
    their scan positions (`Renumbered`)."""

    def __init__(self, source: Source, reorder: Reorder) -> None:
        self.reorder = reorder
        self.items: list[SourceItem] = []
        self.positions: list[int] = []
        origin = source.origin or source.archive
        self.origin = None if origin is None else Renumbered(origin, self.positions, reorder)
        self.scanned_fields = source.origin is None  # a packed SRC's come with its samples

    def add(self, item: SourceItem, label: int) -> None:
        self.positions.append(item.position)
        fields = self.reorder(item.fields) if self.scanned_fields else b""
        self.items.append(SourceItem(len(self.items), item.path, item.key, label,
                                     None if item.origin is None else self.origin, fields))


def _label_for(name: str, names: list[str]) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def _fingerprint(dst: Path, items: list[SourceItem], replaced: list[int],
                 settings: dict[str, Any]) -> str:
    """This append: DST's index, the settings, the samples replaced and the inputs'
    keys, paths, labels, sizes and mtimes (a resume goes on only with the same)."""
    whole = hashlib.sha256((dst / INDEX_NAME).read_bytes())
    whole.update(json.dumps(settings, sort_keys=True).encode())
    whole.update(json.dumps(replaced).encode())
    for item in items:
        try:
            stat = os.stat(item.path)
            facts = f"{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:  # a packed or archive source's sample: its path names no file
            facts = "-"
        whole.update(f"{item.key}\0{item.path}\0{item.label}\0{facts}\0".encode())
        whole.update(hashlib.sha256(item.fields).digest() + b"\n")
    return whole.hexdigest()
