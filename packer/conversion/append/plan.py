"""What an append adds: the inputs of SRC whose keys DST does not hold, with DST's labels.

Keys DST already holds are checked, not re-packed: when DST stores the original files,
the file's digest must equal the stored sample's (else the input is a reject naming the
file and the key); in every case its label must be the same class. New class names
extend DST's label map at the end, so no existing label moves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from packer.conversion.identity import JOB_KEY
from packer.core.index import INDEX_NAME, Index, SampleTable, open_dataset
from packer.core.record import Origin, Reject, SourceItem
from packer.encode import EncodeOptions
from packer.errors import PackError, SourceError
from packer.formats.base import ShardOptions
from packer.source.fields import FieldChoice
from packer.source.packed import read_rejects, stores_original
from packer.source.scan import Source, scan
from packer.storage.files import read_input
from packer.storage.hashing import digest_of

Existing = Literal["size", "digest"]
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


def plan_append(src: Path, dst: Path, asked: dict[str, Any],
                existing: Existing = "size") -> AppendPlan:
    """Open DST, scan SRC and sort its inputs into new ones and ones DST holds.

    `existing`: how an input whose key DST holds is compared with the stored sample
    when DST stores the original files: "size" (a stat), "digest" (read and hashed).
    """
    if existing not in ("size", "digest"):
        raise ValueError(f"existing must be size or digest, not {existing!r}")
    index, table = open_dataset(dst)
    if index.fields:
        raise PackError(f"{dst}: the dataset has per-sample fields, which append does not "
                        "carry yet; convert the union of the sources instead")
    options = stored_options(index, asked)
    source = scan(src, FieldChoice(enabled=False))
    if source.fields:
        raise SourceError(f"{src}: per-sample fields are not appended; pass a source "
                          "without fields")
    names = list(index.class_names)
    mapping = [_label_for(name, names) for name in source.class_names]
    held = Held(table, existing if stores_original(index) and source.origin is None
                and source.archive is None else None)
    items: list[SourceItem] = []
    conflicts: list[Reject] = []
    scanned: list[int] = []  # each new item's position in the scan, which origins read by
    origin = None if source.origin is None and source.archive is None else \
        Renumbered(source.origin or source.archive, scanned)  # type: ignore[arg-type]
    for item in source.items:
        label = mapping[item.label]
        i = held.positions.get(item.key)
        if i is None:
            scanned.append(item.position)
            items.append(SourceItem(len(items), item.path, item.key, label,
                                    None if item.origin is None else origin))
        elif (problem := held.conflict(item, label, i)) is not None:
            conflicts.append(Reject(item.position, item.path,
                                    f"key {item.key!r} is already in {dst} {problem}; "
                                    "rename the file, or convert the union instead"))
    shards = shard_options(index)
    fingerprint = _fingerprint(dst, items, {"format": index.format,
                                            "encode": options.to_json(),
                                            "shards": dataclasses.asdict(shards)})
    return AppendPlan(dst, index, table, source, items, tuple(names), conflicts,
                      read_rejects(dst), options, shards, fingerprint)


def _label_for(name: str, names: list[str]) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def _fingerprint(dst: Path, items: list[SourceItem], settings: dict[str, Any]) -> str:
    """This append: DST's index, the settings, and the new inputs' keys, paths, labels,
    sizes and mtimes (a resume goes on only with the same)."""
    whole = hashlib.sha256((dst / INDEX_NAME).read_bytes())
    whole.update(json.dumps(settings, sort_keys=True).encode())
    for item in items:
        try:
            stat = os.stat(item.path)
            facts = f"{stat.st_size}:{stat.st_mtime_ns}"
        except OSError:  # a packed or archive source's sample: its path names no file
            facts = "-"
        whole.update(f"{item.key}\0{item.path}\0{item.label}\0{facts}\n".encode())
    return whole.hexdigest()


class Renumbered:
    """A packed or archive source's reader for the new items, numbered 0..n-1 in the
    append (what its writer loop and journal count in), which it reads by their
    positions in the scan."""

    def __init__(self, origin: Origin, positions: list[int]) -> None:
        self.origin = origin
        self.positions = positions

    @property
    def pixel_size(self) -> tuple[int, int] | None:
        return self.origin.pixel_size

    @property
    def whole_files(self) -> bool:
        return self.origin.whole_files

    def read(self, item: SourceItem) -> bytes:
        return self.origin.read(self._scanned(item))

    def read_fields(self, item: SourceItem) -> bytes:
        read = getattr(self.origin, "read_fields", None)
        return b"" if read is None else bytes(read(self._scanned(item)))

    def _scanned(self, item: SourceItem) -> SourceItem:
        return dataclasses.replace(item, position=self.positions[item.position])


class Held:
    """DST's keys, labels, sizes and digests as plain values, for one look-up an input."""

    def __init__(self, table: SampleTable, existing: Existing | None) -> None:
        blob = bytes(table.keys_blob)
        starts = [*np.asarray(table.rows["key_start"]).tolist(), len(blob)]
        self.positions = {blob[a:b].decode("utf-8"): i
                          for i, (a, b) in enumerate(itertools.pairwise(starts))}
        self.labels = np.asarray(table.labels).tolist()
        self.sizes = np.asarray(table.sizes).tolist()
        self.table = table
        self.existing = existing  # None: the stored bytes are not the file's

    def conflict(self, item: SourceItem, label: int, i: int) -> str | None:
        """Why an input whose key DST holds (sample i) is not that sample, or None."""
        if self.labels[i] != label:
            return f"with another class (sample {i})"
        if self.existing is None:
            return None  # re-encoded samples: only a re-encode could compare the bytes
        try:
            size = os.stat(item.path).st_size
            if size != self.sizes[i]:
                return f"with other bytes ({size} bytes, sample {i} has {self.sizes[i]})"
            if self.existing == "digest" and \
                    digest_of(read_input(item.path)) != self.table.digest(i):
                return f"with other bytes (sample {i})"
        except OSError:  # unreadable now: the sample DST holds stays
            return None
        return None
