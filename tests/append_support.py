"""Helpers for the append tests: a base dataset, new inputs beside it, the union's table."""

from __future__ import annotations

import shutil
from pathlib import Path

from packer import ConvertOptions, EncodeOptions, convert
from packer.core.index import Index, SampleTable, open_dataset
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder

BASE, ADDED = 24, 20  # inputs in the first conversion, and added after


def options_for(fmt: str) -> EncodeOptions | None:
    return EncodeOptions(size=(24, 24)) if fmt == "npy" else None


def make_sources(root: Path) -> tuple[Path, Path]:
    """`root/base` (3 classes) and `root/union`: the base plus ADDED new inputs, some in
    two new classes, one of which sorts before every old one."""
    base = make_sample_folder(root / "base", count=BASE, classes=3, min_side=24, max_side=48)
    extra = make_sample_folder(root / "extra", count=ADDED, classes=5, seed=7, min_side=24,
                               max_side=48)
    union = root / "union"
    shutil.copytree(base, union)
    for path in sorted(extra.rglob("*.*")):
        name = path.parent.name if path.parent.name != "class_04" else "a_first"
        folder = union / name
        folder.mkdir(exist_ok=True)
        shutil.copy(path, folder / f"new_{path.name}")
    return base, union


def pack(src: Path, dst: Path, fmt: str) -> Index:
    return convert(src, dst, fmt, options_for(fmt),
                   ConvertOptions(ShardOptions(max_samples=8), workers=0))


def samples(folder: Path) -> list[tuple[str, str, bytes]]:
    """(key, class name, digest) of every sample, in sample order."""
    index, table = open_dataset(folder)
    return [(table.key(i), index.class_names[int(table.labels[i])], table.digest(i))
            for i in range(len(table))]


def rows(table: SampleTable) -> bytes:
    return bytes(table.rows.tobytes()) + bytes(table.keys_blob.tobytes())


def field_bytes(folder: Path) -> dict[str, list[bytes | None]]:
    """{key: the sample's field values in byte form, the index's order}, read through
    the format's reader (each sample checked against its field digest)."""
    from packer import formats

    index, table = open_dataset(folder)
    reader = formats.load(index.format).open_reader(folder, index, table)
    try:
        values = reader.field_values_many(list(range(len(table))))
        return {table.key(i): list(values[i]) for i in range(len(table))}
    finally:
        reader.close()
