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

    def scan_rejects(self) -> list[Reject]:
        """The scan's rejects that DST's rejects.jsonl does not list yet."""
        listed = {reject.path for reject in self.old_rejects}
        return [r for r in self.source.rejects if r.path not in listed]


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
    """Open DST, scan SRC and sort its inputs into new ones and ones DST holds.

    `existing`: how an input whose key DST holds is compared with the stored sample
    when DST stores the original files: "size" (a stat), "digest" (read and hashed).
    `fields`: which of SRC's fields to take (default: all; each must be one of DST's).
    `replace`: an input whose key DST holds with other bytes, class or field values
    replaces that sample (same index) instead of being a reject. `drop_duplicates`: a
    new input whose stored bytes a sample (old or new) has is a reject.
    """
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
    sorted_ = _Sorted(source, reorder)
    for item in source.items:
        label = mapping[item.label]
        i = held.positions.get(item.key)
        if i is None:
            sorted_.add_new(item, label)
            continue
        fields_record = reorder(item.fields) if item.origin is None else b""
        if (problem := held.conflict(item, label, fields_record, i)) is None:
            continue
        if replace:
            sorted_.add_replacement(item, label, i)
        else:
            sorted_.conflicts.append(Reject(item.position, item.path,
                                            f"key {item.key!r} is already in {dst} {problem}; "
                                            "rename the file, append with --replace, or "
                                            "convert the union instead"))
    shards = shard_options(index)
    settings = {"format": index.format, "encode": options.to_json(),
                "shards": dataclasses.asdict(shards), "drop_duplicates": drop_duplicates}
    fingerprint = _fingerprint(dst, [*sorted_.items, *sorted_.replacing], sorted_.replaced,
                               settings)
    return AppendPlan(dst, index, table, source, sorted_.items, tuple(names),
                      sorted_.conflicts, read_rejects(dst), options, shards, fingerprint,
                      sorted_.replacing, sorted_.replaced, drop_duplicates)


class _Sorted:
    """The inputs of a plan as they are sorted: new ones, replacements, conflicts; each
    staging numbers its items 0..n-1 and reads a packed or archive SRC by scan position."""

    def __init__(self, source: Source, reorder: Reorder) -> None:
        self.reorder = reorder
        self.items: list[SourceItem] = []
        self.replacing: list[SourceItem] = []
        self.replaced: list[int] = []
        self.conflicts: list[Reject] = []
        self._scanned: tuple[list[int], list[int]] = ([], [])
        origin = source.origin or source.archive
        self._origins = (None, None) if origin is None else \
            tuple(Renumbered(origin, scanned, reorder)
                  for scanned in self._scanned)

    def add_new(self, item: SourceItem, label: int) -> None:
        self.items.append(self._renumbered(item, label, 0, len(self.items)))

    def add_replacement(self, item: SourceItem, label: int, i: int) -> None:
        self.replacing.append(self._renumbered(item, label, 1, len(self.replacing)))
        self.replaced.append(i)

    def _renumbered(self, item: SourceItem, label: int, which: int, at: int) -> SourceItem:
        self._scanned[which].append(item.position)
        if item.origin is None:
            return SourceItem(at, item.path, item.key, label, None, self.reorder(item.fields))
        return SourceItem(at, item.path, item.key, label, self._origins[which])


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
