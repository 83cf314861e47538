"""A str field with a NUL byte: HDF5's strings cannot hold one, so in hdf5 that sample
is a reject naming the field (it failed the whole file at the end, naming nothing);
the other formats keep it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packer import ConvertOptions, convert
from readers import PackedDataset
from tests.helpers import assert_one_line_error, jsonl_manifest, run_pack

CAPTIONS = ["a cat", "nul \x00 inside", "a dog"]


def manifest(root: Path) -> Path:
    return jsonl_manifest(root, [{"caption": caption} for caption in CAPTIONS])


def test_hdf5_rejects_the_sample_naming_the_field(tmp_path: Path) -> None:
    src = manifest(tmp_path / "src")
    index = convert(src, tmp_path / "out", "hdf5", run=ConvertOptions(workers=0))
    assert index.num_samples == 2 and index.num_rejected == 1
    (reject,) = map(json.loads, (tmp_path / "out" / "rejects.jsonl").read_text().splitlines())
    assert reject["path"].endswith("1.png") and "field 'caption' holds a NUL" in reject["reason"]
    ds = PackedDataset(tmp_path / "out", fields=("caption",))
    assert sorted(ds[i]["caption"] for i in range(2)) == ["a cat", "a dog"]
    failed = run_pack("convert", src, tmp_path / "fail", "--to", "hdf5", "--on-error", "fail")
    assert_one_line_error(failed, 1, "1.png", "field 'caption' holds a NUL")


@pytest.mark.parametrize("fmt", ["wds", "lmdb"])
def test_other_formats_keep_it(tmp_path: Path, fmt: str) -> None:
    convert(manifest(tmp_path / "src"), tmp_path / fmt, fmt, run=ConvertOptions(workers=0))
    ds = PackedDataset(tmp_path / fmt, fields=("caption",))
    assert sorted(ds[i]["caption"] for i in range(3)) == sorted(CAPTIONS)
