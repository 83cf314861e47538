"""Damaged datasets through the readers: a specific packer error, never wrong data.

Every case damages a copy of a small dataset (truncate, flip, delete, swap, edit
index.json or the per-sample table), then reads every sample with PackedDataset and a
full pass of PackedIterableDataset. The outcome must be CorruptDatasetError or
IncompleteDatasetError naming the damaged file, or, where the damage is in bytes a
reader never uses (a tar header, LMDB's free space), exactly the original samples.
A library exception (lmdb, h5py, numpy, tarfile, json) is a failure. `pack verify`
on the same kinds of damage is tested in test_cli.py.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from packer import ConvertOptions, convert
from packer.core.checks import files_digest
from packer.core.index import INDEX_NAME, KEYS_NAME, SAMPLES_NAME, TABLE_DIGEST, open_dataset
from packer.encode import EncodeOptions
from packer.errors import CorruptDatasetError, IncompleteDatasetError
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from readers import PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions
from tests.helpers import FORMATS

DATA = {"wds": "wds-00001.tar", "lmdb": "data.lmdb/data.mdb", "hdf5": "data.h5",
        "npy": "images.npy"}
Samples = list[tuple[bytes, int, str]]
Damage = Callable[[Path, str], str]  # (folder, fmt) -> the name the error must mention


def pack_all(root: Path, seed: int) -> dict[str, Path]:
    src = make_sample_folder(root / "src", count=30, classes=3, min_side=32, max_side=64,
                             seed=seed)
    out = {}
    for fmt in FORMATS:
        options = EncodeOptions(size=(16, 16)) if fmt == "npy" else None
        convert(src, root / fmt, fmt, options,
                ConvertOptions(workers=0, shards=ShardOptions(max_samples=5)))
        out[fmt] = root / fmt
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_all(tmp_path_factory.mktemp("damage"), seed=1)


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Datasets of another source, same layout: their files are swapped in."""
    return pack_all(tmp_path_factory.mktemp("damage-other"), seed=2)


@pytest.fixture(scope="module")
def originals(packed: dict[str, Path]) -> dict[str, Samples]:
    return {fmt: read_map(path) for fmt, path in packed.items()}


def read_map(folder: Path) -> Samples:
    ds = PackedDataset(folder, decode="raw", with_keys=True, max_cache_bytes=0)
    out = []
    for start in range(0, len(ds), 7):
        batch = ds.__getitems__(list(range(start, min(start + 7, len(ds)))))
        out += [(bytes(data), int(label), str(key)) for data, label, key in batch]
    ds.close()
    return out


def read_iterable(folder: Path) -> Samples:
    it = PackedIterableDataset(folder, shuffle=False, decode="raw", with_keys=True,
                               partition=PartitionOptions(drop_last=False, chunk_size=4))
    out = [(bytes(data), int(label), str(key)) for data, label, key in it]
    it.close()
    return out


def assert_refused_or_intact(folder: Path, name: str, original: Samples) -> str:
    """Both readers refuse with our error naming `name`, or give the original samples."""
    outcomes = []
    for read in (read_map, read_iterable):
        try:
            got = read(folder)
        except (CorruptDatasetError, IncompleteDatasetError) as exc:
            assert name in str(exc), (name, str(exc))
            assert "\n" not in str(exc)
            outcomes.append("refused")
        else:
            assert sorted(got, key=lambda s: s[2]) == original, "wrong data from a damaged set"
            outcomes.append("intact")
    return "+".join(sorted(set(outcomes)))


# ---------------------------------------------------------------- the damage


def flip(path: Path, offset: int, count: int = 1) -> None:
    data = bytearray(path.read_bytes())
    for i in range(offset, min(offset + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate_to(fraction: float) -> Damage:
    def damage(folder: Path, fmt: str) -> str:
        path = folder / DATA[fmt]
        os.truncate(path, int(path.stat().st_size * fraction))
        return DATA[fmt]
    return damage


def truncate_tail(folder: Path, fmt: str) -> str:
    path = folder / DATA[fmt]
    os.truncate(path, path.stat().st_size - 2600)  # into the last sample of a tar
    return DATA[fmt]


def flip_sample(folder: Path, fmt: str) -> str:
    index, table = open_dataset(folder)
    sample = int(index.shard_starts[1]) + 2 if fmt == "wds" else 12
    offset = int(table.offsets[sample]) + int(table.sizes[sample]) // 2
    if fmt == "lmdb":  # find the value inside the file
        offset = (folder / DATA[fmt]).read_bytes().find(read_map(folder)[sample][0]) + 20
    elif fmt == "hdf5":
        import h5py
        with h5py.File(folder / DATA[fmt], "r") as h5:
            offset += int(h5["images"].id.get_offset())
    flip(folder / DATA[fmt], offset, 3)
    return DATA[fmt]


def flip_header(folder: Path, fmt: str) -> str:
    """The start of the file: a tar header, LMDB's meta page, the HDF5 superblock, npy magic."""
    flip(folder / DATA[fmt], {"wds": 20, "lmdb": 24, "hdf5": 3, "npy": 2}[fmt], 4)
    return DATA[fmt]


def delete_data(folder: Path, fmt: str) -> str:
    path = folder / DATA[fmt]
    path.unlink()
    return DATA[fmt]


def delete_file(name: str) -> Damage:
    def damage(folder: Path, fmt: str) -> str:
        (folder / name).unlink()
        return name
    return damage


def swap_shards(folder: Path, fmt: str) -> str:
    first, second = folder / "wds-00000.tar", folder / "wds-00001.tar"
    first.rename(folder / "tmp")
    second.rename(first)
    (folder / "tmp").rename(second)
    return "wds-0000"


def edit_index(change: Callable[[dict[str, Any]], Any]) -> Damage:
    def damage(folder: Path, fmt: str) -> str:
        path = folder / INDEX_NAME
        data = json.loads(path.read_text())
        replaced = change(data)
        path.write_text(replaced if isinstance(replaced, str) else json.dumps(data))
        return INDEX_NAME
    return damage


def shift_a_sample(folder: Path, fmt: str) -> str:
    """Counts still add up, but samples move into neighbouring shards: the shards' bytes
    no longer hold them, and the error names a shard."""
    def change(data: dict[str, Any]) -> None:
        data["shards"][0]["num_samples"] -= 1
        data["shards"][-1]["num_samples"] += 1
    edit_index(change)(folder, fmt)
    return "wds-0000"


def restamp(folder: Path) -> None:
    """Make index.json vouch for the edited table, as someone patching it would: the
    checks behind the table digest must catch the edit on their own."""
    path = folder / INDEX_NAME
    data = json.loads(path.read_text())
    data["extra"][TABLE_DIGEST] = files_digest((folder / SAMPLES_NAME, folder / KEYS_NAME))
    path.write_text(json.dumps(data))


def edit_array(name: str, change: Callable[[np.ndarray], None], vouched: bool) -> Damage:
    """Change one of the table's .npy files in place; `vouched`: restamp its digest."""
    def damage(folder: Path, fmt: str) -> str:
        array = np.load(folder / name)
        change(array)
        with open(folder / name, "wb") as handle:
            np.save(handle, array)
        if vouched:
            restamp(folder)
        return name
    return damage


def edit_table(column: str, value: int, vouched: bool = True) -> Damage:
    def change(rows: np.ndarray) -> None:
        rows[column][3] = value
    return edit_array(SAMPLES_NAME, change, vouched)


def huge_offset(folder: Path, fmt: str) -> str:
    edit_table("offset", 2**62)(folder, fmt)
    return "wds-00000.tar"  # refused by the read, before any allocation


def edit_key(byte: int, vouched: bool = True) -> Damage:
    def change(keys: np.ndarray) -> None:
        keys[2] = byte
    return edit_array(KEYS_NAME, change, vouched)


CASES: dict[str, Damage] = {
    "truncate to 0": truncate_to(0.0),
    "truncate to half": truncate_to(0.5),
    "truncate 2600 bytes": truncate_tail,
    "flip a sample": flip_sample,
    "flip the header": flip_header,
    "delete the data file": delete_data,
    "delete samples.npy": delete_file(SAMPLES_NAME),
    "delete keys.npy": delete_file(KEYS_NAME),
    "delete index.json": delete_file(INDEX_NAME),
    "index: num_samples + 1": edit_index(lambda d: d.update(num_samples=d["num_samples"] + 1)),
    "index: a shard count - 1": edit_index(lambda d: d["shards"][0].update(
        num_samples=d["shards"][0]["num_samples"] - 1)),
    "index: truncated JSON": edit_index(lambda d: json.dumps(d)[:-30]),
    "index: empty": edit_index(lambda d: ""),
    "index: binary": edit_index(lambda d: "\x00\xff\x13"),
    "index: NaN": edit_index(lambda d: json.dumps(d).replace('"num_rejected": 0',
                                                              '"num_rejected": NaN')),
    "index: format_version 3": edit_index(lambda d: d.update(format_version=3)),
    "index: format 'zip'": edit_index(lambda d: d.update(format="zip")),
    "index: class_names gone": edit_index(lambda d: d.pop("class_names")),
    "index: shard name ../x": edit_index(lambda d: d["shards"][0].update(name="../x")),
    "index: num_samples 'ten'": edit_index(lambda d: d.update(num_samples="ten")),
    "table: another class's label": edit_table("label", 1, vouched=False),
    "table: another key": edit_key(ord("z"), vouched=False),
    "table: label out of range, index patched": edit_table("label", 7),
    "table: negative size, index patched": edit_table("size", -5),
    "table: key past keys.npy, index patched": edit_table("key_start", 10**9),
    "table: key not UTF-8, index patched": edit_key(0xFF),
}
WDS_CASES: dict[str, Damage] = {
    "swap two shards": swap_shards,
    "index: a sample moved to another shard": shift_a_sample,
    "table: a huge offset, index patched": huge_offset,
}


def apply(packed: dict[str, Path], fmt: str, tmp_path: Path, damage: Damage) -> tuple[Path, str]:
    folder = shutil.copytree(packed[fmt], tmp_path / fmt)
    return folder, damage(folder, fmt)


@pytest.mark.parametrize("case", list(CASES))
def test_damage_is_refused_by_both_readers(packed: dict[str, Path], originals: dict[str, Samples],
                                           tmp_path: Path, fmt: str, case: str) -> None:
    folder, name = apply(packed, fmt, tmp_path, CASES[case])
    outcome = assert_refused_or_intact(folder, name, originals[fmt])
    if case != "flip the header" or fmt in ("hdf5", "npy"):
        assert outcome == "refused", f"{case}: the readers did not notice"


@pytest.mark.parametrize("case", list(WDS_CASES))
def test_wds_damage_is_refused(packed: dict[str, Path], originals: dict[str, Samples],
                               tmp_path: Path, case: str) -> None:
    folder, name = apply(packed, "wds", tmp_path, WDS_CASES[case])
    assert assert_refused_or_intact(folder, name, originals["wds"]) == "refused"


def test_a_data_file_from_another_dataset_is_refused(packed: dict[str, Path],
                                                     other: dict[str, Path],
                                                     originals: dict[str, Samples],
                                                     tmp_path: Path, fmt: str) -> None:
    """Same layout, other images: every per-sample digest differs."""
    folder = shutil.copytree(packed[fmt], tmp_path / fmt)
    shutil.copy(other[fmt] / DATA[fmt], folder / DATA[fmt])
    assert assert_refused_or_intact(folder, DATA[fmt], originals[fmt]) == "refused"


def test_a_whole_lmdb_folder_missing_is_refused(packed: dict[str, Path],
                                                tmp_path: Path) -> None:
    folder = shutil.copytree(packed["lmdb"], tmp_path / "lmdb")
    shutil.rmtree(folder / "data.lmdb")
    with pytest.raises(CorruptDatasetError, match=r"data\.mdb: missing"):
        read_map(folder)
