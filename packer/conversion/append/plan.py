"""What an append adds: the inputs of SRC whose keys DST does not hold, with DST's labels.

Keys DST already holds are checked, not re-packed: when DST stores the original files,
the file's digest must equal the stored sample's (else the input is a reject naming the
file and the key); in every case its label must be the same class. New class names
extend DST's label map at the end, so no existing label moves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packer.conversion.identity import JOB_KEY, identify
from packer.core.index import INDEX_NAME, Index, SampleTable, open_dataset
from packer.core.record import Reject, SourceItem
from packer.encode import EncodeOptions
from packer.errors import PackError, SourceError
from packer.formats.base import ShardOptions
from packer.source.fields import FieldChoice
from packer.source.packed import read_rejects, stores_original
from packer.source.scan import Source, scan
from packer.storage.files import read_input
from packer.storage.hashing import digest_of

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


def plan_append(src: Path, dst: Path, asked: dict[str, Any]) -> AppendPlan:
    """Open DST, scan SRC and sort its inputs into new ones and ones DST holds."""
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
    held = {table.key(i): i for i in range(len(table))}
    original = stores_original(index) and source.origin is None and source.archive is None
    items: list[SourceItem] = []
    conflicts: list[Reject] = []
    for item in source.items:
        label = mapping[item.label]
        i = held.get(item.key)
        if i is None:
            items.append(SourceItem(len(items), item.path, item.key, label, item.origin))
            continue
        problem = _conflict(item, label, i, table, original)
        if problem is not None:
            conflicts.append(Reject(item.position, item.path,
                                    f"key {item.key!r} is already in {dst} {problem}; "
                                    "rename the file, or convert the union instead"))
    shards = shard_options(index)
    settings = {"format": index.format, "encode": options.to_json(),
                "shards": dataclasses.asdict(shards)}
    whole = hashlib.sha256((dst / INDEX_NAME).read_bytes())
    whole.update(identify(source, settings).fingerprint.encode())
    whole.update(json.dumps(settings, sort_keys=True).encode())
    return AppendPlan(dst, index, table, source, items, tuple(names), conflicts,
                      read_rejects(dst), options, shards, whole.hexdigest())


def _label_for(name: str, names: list[str]) -> int:
    if name not in names:
        names.append(name)
    return names.index(name)


def _conflict(item: SourceItem, label: int, i: int, table: SampleTable,
              original: bool) -> str | None:
    """Why an input whose key DST holds (sample i) is not that sample, or None."""
    if int(table.labels[i]) != label:
        return f"with another class (sample {i})"
    if not original:
        return None  # re-encoded samples: only a full re-encode could compare the bytes
    try:
        data = read_input(item.path)
    except Exception:  # unreadable now: the sample DST holds stays
        return None
    if digest_of(data) != table.digest(i):
        return f"with other bytes (sample {i})"
    return None
