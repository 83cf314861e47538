"""HF datasets reads our wds shards with the call the README shows:

    datasets.load_dataset("webdataset", data_files={"train": f"{DST}/*.tar"})

(`data_dir=DST` would read index.json and the tables as tars too.) Skipped when
datasets is missing (`pip install '.[frameworks]'`); offline, caches under tmp_path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest

from packer import ConvertOptions, EncodeOptions, convert
from packer.formats.base import ShardOptions
from tests.helpers import decoded_by_key

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # read when datasets is imported
os.environ.setdefault("HF_HUB_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

RUN = ConvertOptions(shards=ShardOptions(max_samples=5), workers=0)


def load(dst: Path, cache: Path) -> Any:
    return datasets.load_dataset("webdataset", data_files={"train": f"{dst}/*.tar"},
                                 split="train", cache_dir=str(cache))


def test_hf_reads_our_shards(odd_src: Path, tmp_path: Path) -> None:
    """Odd keys (dots, %, non-ASCII, pax-length names, a newline) in several shards."""
    dst = tmp_path / "photos.wds"
    convert(odd_src, dst, "wds", EncodeOptions(codec="jpeg"), RUN)  # one image type
    expected = decoded_by_key(dst)
    rows = load(dst, tmp_path / "hf-cache")
    assert sorted(rows.features) == ["__key__", "__url__", "cls", "jpg"]
    keys = [unquote(row["__key__"]) for row in rows]
    # HF skips members whose file name starts with "__" (hidden files, to it): README
    assert sorted(set(expected) - set(keys)) == ["klasse ß/__meta__"]
    assert keys == [key for key in expected if key != "klasse ß/__meta__"]  # index order
    for key, row in zip(keys, rows, strict=True):
        label, pixels = expected[key]
        assert row["cls"] == label, key
        assert np.array_equal(np.asarray(row["jpg"].convert("RGB")), pixels), key


def test_hf_refuses_mixed_image_types(src: Path, tmp_path: Path) -> None:
    """What `pack convert` notes: pass-through keeps PNGs among JPEGs, and HF wants one
    field set for every sample."""
    dst = tmp_path / "mixed.wds"
    index = convert(src, dst, "wds", run=RUN)
    assert index.extra["image_types"] == ["jpg", "png"]
    with pytest.raises(ValueError, match="same types"):
        load(dst, tmp_path / "hf-cache")
