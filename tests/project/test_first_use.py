"""What a newcomer meets on a first try: an empty source, `pack info`, the summary line.

A folder without images is refused before DST is touched (an empty dataset would block
the retry); `pack info` shows only the encode options that shaped the stored images; the
summary line says "shard" only for wds, the one sharded format.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from packer.formats import FORMATS
from packer.testing import make_sample_folder
from tests.helpers import assert_one_line_error, run_pack

FORMAT_ARGS = {"wds": [], "lmdb": [], "hdf5": [], "npy": ["--size", "16x16"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_folder_without_images_is_refused_and_nothing_written(tmp_path: Path,
                                                                 fmt: str) -> None:
    src = tmp_path / "noimg"
    (src / "cat").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "notes.md"):
        (src / "cat" / name).write_text("hi")
    dst = tmp_path / "out"
    result = run_pack("convert", src, dst, "--to", fmt, *FORMAT_ARGS[fmt])
    assert_one_line_error(result, 1, f"{src}: no images found",
                          "3 other files (.txt x2, .md) in 1 class folder: cat",
                          "SRC/<class>/<image>", ".jpg", "manifest")
    assert not dst.exists()
    make_sample_folder(src, count=2, classes=1)  # the retry, once images are there
    done = run_pack("convert", src, dst, "--to", fmt, *FORMAT_ARGS[fmt])
    assert done.exit_code == 0, done.output


def test_empty_class_folders_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "empty"
    for name in ("cat", "dog"):
        (src / name).mkdir(parents=True)
    result = run_pack("convert", src, tmp_path / "out.lmdb", "--to", "lmdb")
    assert_one_line_error(result, 1, "no images found (no files in 2 class folders: cat, dog)")
    assert not (tmp_path / "out.lmdb").exists()


def test_info_shows_only_the_encode_options_that_applied(src: Path, tmp_path: Path) -> None:
    plain, pixels = tmp_path / "plain.h5", tmp_path / "pixels.npy"
    assert run_pack("convert", src, plain, "--to", "hdf5", "-q").exit_code == 0
    assert run_pack("convert", src, pixels, "--to", "npy", "--size", "16x16", "-q"
                    ).exit_code == 0
    facts = json.loads(run_pack("info", plain, "--json").stdout)
    assert facts["encode"] == {"check": "decode", "mode": "passthrough"}
    text = run_pack("info", plain).stdout
    assert "quality" not in text and "fit" not in text and "crop" not in text
    encode = json.loads(run_pack("info", pixels, "--json").stdout)["encode"]
    assert encode == {"check": "decode", "mode": "pixels", "size": [16, 16], "fit": "crop",
                      "upscale": False}


def test_the_summary_says_shards_for_wds_only(src: Path, tmp_path: Path) -> None:
    one = run_pack("convert", src, tmp_path / "a.h5", "--to", "hdf5", "-q")
    assert re.fullmatch(rf"packed 24 samples into {re.escape(str(tmp_path / 'a.h5'))} "
                        r"\(hdf5, [0-9.]+ kB\) in [0-9.]+ s", one.stdout.strip())
    wds = run_pack("convert", src, tmp_path / "a.wds", "--to", "wds", "--shard-size", "256MB",
                   "-q")
    assert re.fullmatch(rf"packed 24 samples into {re.escape(str(tmp_path / 'a.wds'))} "
                        r"\(wds, 1 shard, [0-9.]+ kB\) in [0-9.]+ s", wds.stdout.strip())
    many = run_pack("convert", src, tmp_path / "b.wds", "--to", "wds", "--shard-samples", "10",
                    "-q")
    assert "(wds, 3 shards, " in many.stdout
