"""WebDataset shards as the source: whoever wrote them (webdataset's TarWriter,
img2dataset, `tar` by hand), read in place, each image's bytes as they are.

Samples are grouped by webdataset's own rule: a member's key is its path up to the
first dot of its file name, its extension the rest (`a/b.seg.png` -> key `a/b`,
extension `seg.png`), and consecutive members with one key are one sample. A sample's
image is its first member with an image extension (jpg, jpeg, png, webp, ...: IMAGE_ORDER);
the label comes from `.cls` (an integer, or a class name) or as `--label` chooses
(LabelChoice); every other member is a field named after its extension: `txt`, `text`
and `caption` are str, `json` is json, anything else bytes (its bytes as they are).

A sample with no image, a second sample with a key already seen, a member whose path
escapes the shard, a label that cannot be read: each is a reject naming
`SHARD:MEMBER` and why. The small members (labels, fields) are read during the scan,
one shard at a time (a .tgz in one forward pass); images are read at encode time by
offset (`ShardSet`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packer.core.fields import FieldValueError
from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.archive import checked_kind, clean_name, list_members
from packer.source.fields import FieldChoice
from packer.source.kinds import Source
from packer.source.members import ArchiveStat, Entry, stat_archive
from packer.source.shardset import ShardSetBuilder, read_small_members
from packer.source.wds_labels import LabelChoice, Labels
from packer.source.wds_records import FieldNames, final_specs

KEY_RULE = re.compile(r"^((?:.*/|)[^./][^/]*?)\.([^/]*)$")  # webdataset's base_plus_ext
IMAGE_ORDER = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm", "pbm")


@dataclass
class Sample:
    """One sample's members while its shard is scanned (transient)."""

    key: str
    members: dict[str, Entry] = field(default_factory=dict)
    small: dict[str, bytes] = field(default_factory=dict)  # labels and fields, read


@dataclass
class WdsScan:
    """What the scan of every shard found, before the items are built."""

    labels: Labels
    names: FieldNames = field(default_factory=FieldNames)
    rejects: list[Reject] = field(default_factory=list)
    ignored: int = 0


def scan_shards(shards: list[Path], choice: FieldChoice, label: LabelChoice) -> Source:
    """The items of these shards (in key order), their reader, classes, rejects, the
    count of ignored members and the fields."""
    found = WdsScan(Labels(label))
    root = shards[0] if len(shards) == 1 else shards[0].parent
    where = str(root)
    builder = ShardSetBuilder()
    for number, shard in enumerate(shards):
        kind = checked_kind(shard)
        before = stat_archive(shard)
        entries = list_members(shard, kind, before, _Entries).entries
        samples = list(_grouped(entries, str(shard), found))
        if number == 0:
            found.labels.settle(any("cls" in sample.members for sample in samples))
        builder.shard(shard, kind, before)
        _add_samples(shard, kind, before, samples, found, builder, choice.enabled)
    specs = final_specs(found.names, choice, where)
    class_names, remap = found.labels.classes(where)
    items, reader = builder.build(found.rejects, remap, found.names.remapper(specs))
    if not len(items):
        raise _nothing_packable(where, len(shards), found.rejects)
    found.rejects.sort(key=lambda reject: reject.path)
    return Source(root, items, class_names, found.rejects, found.ignored, archive=reader,
                  fields=specs)


def _nothing_packable(where: str, count: int, rejects: list[Reject]) -> SourceError:
    """The error for shards none of whose samples can be packed: an empty dataset would
    block the retry, so the scan refuses it, with the first reason where there is one."""
    shards = f"{count} shard{'s' * (count != 1)}"
    if rejects:
        first = min(rejects, key=lambda reject: reject.path)
        return SourceError(f"{where}: none of the {len(rejects)} samples in {shards} can be "
                           f"packed (first: {first.path}: {first.reason})")
    return SourceError(f"{where}: no sample with an image member (jpg, png, webp, ...) in "
                       f"{shards}; is it a webdataset of images?")


class _Entries:
    """Every member of one shard, in archive order (a shard's worth: bounded)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def add(self, entry: Entry) -> None:
        self.entries.append(entry)


def _grouped(entries: list[Entry], where: str, found: WdsScan) -> Iterator[Sample]:
    """Consecutive members sharing a key, as samples (webdataset's group_by_keys)."""
    current: Sample | None = None
    for entry in entries:
        if entry.kind == "dir":
            continue
        name = clean_name(entry.name)
        if name is None:
            found.rejects.append(Reject(-1, f"{where}:{entry.name}",
                                        "path escapes the shard (`..` or absolute); skipped"))
            continue
        match = KEY_RULE.match(name)
        if match is None or entry.kind != "file":
            found.ignored += 1  # no extension, a hidden name, a link: not a sample member
            continue
        key, ext = match.group(1), match.group(2).lower()
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = Sample(key)
        if ext in current.members:
            found.rejects.append(Reject(-1, f"{where}:{name}", "a second member with this "
                                        "key and extension; the first is kept"))
            continue
        current.members[ext] = entry
    if current is not None:
        yield current


def _add_samples(shard: Path, kind: str, before: ArchiveStat, samples: list[Sample],
                 found: WdsScan, builder: ShardSetBuilder, with_fields: bool) -> None:
    """Read the shard's small members, then add each sample with an image."""
    labels = found.labels
    images = [next((ext for ext in IMAGE_ORDER if ext in sample.members), None)
              for sample in samples]
    small = [(sample, ext) for sample, image in zip(samples, images, strict=True)
             for ext in sample.members
             if image != ext and (labels.needs(ext) or
                                  (with_fields and not labels.consumes(ext)))]
    data = read_small_members(shard, kind, before, [s.members[e] for s, e in small])
    for (sample, ext), raw in zip(small, data, strict=True):
        sample.small[ext] = raw
    for sample, image in zip(samples, images, strict=True):
        path = f"{shard}:{sample.key}"
        if image is None:
            found.rejects.append(Reject(-1, path, "no image member (jpg, png, webp, ...) in "
                                        f"this sample (it has .{', .'.join(sample.members)})"))
            continue
        try:
            token = labels.token(sample.small)
            record = found.names.record({ext: raw for ext, raw in sample.small.items()
                                         if not labels.consumes(ext)}) \
                if with_fields else b""
        except FieldValueError as exc:
            found.rejects.append(Reject(-1, f"{path}.{image}", str(exc)))
            continue
        builder.add(sample.key, f"{path}.{image}", token, sample.members[image], record)
