"""A newcomer's first commands through click's CliRunner: unlabelled folders (--label
none), the format from DST's suffix, options that do not apply, the summary's time and
size, `pack info` on an image folder, and a readable `pack info` after --resize."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from packer import ConvertOptions, convert
from packer.core.index import open_dataset
from packer.formats.base import ShardOptions
from tests.helpers import (
    assert_one_line_error,
    count_adds,
    jpeg_bytes,
    random_image,
    run_pack,
)


def write_images(folder: Path, count: int, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image = random_image(24 + i, 20, seed + i)
        (folder / f"img_{i}.jpg").write_bytes(jpeg_bytes(image))


@pytest.fixture
def flat(tmp_path: Path) -> Path:
    """5 images at the top level, 2 in a sub-folder, and a hidden file."""
    root = tmp_path / "flat"
    write_images(root, 5)
    write_images(root / "more", 2, seed=10)
    (root / ".DS_Store").write_bytes(b"finder")
    return root


# ---------------------------------------------------------------- --label none


def test_a_flat_folder_is_refused_with_its_image_count(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    write_images(root, 3)
    result = run_pack("convert", root, tmp_path / "out.wds", "--to", "wds")
    assert_one_line_error(result, 1, "no class sub-folders", "3 images at the top level",
                          "--label none")
    assert not (tmp_path / "out.wds").exists()


@pytest.mark.parametrize("fmt", ["wds", "lmdb"])
def test_label_none_packs_every_image_as_one_class(flat: Path, tmp_path: Path,
                                                   fmt: str) -> None:
    dst = tmp_path / f"out.{fmt}"
    result = run_pack("convert", flat, dst, "--label", "none", "-q")
    assert result.exit_code == 0, result.output
    index, table = open_dataset(dst)
    assert index.class_names == ("unlabelled",)
    assert sorted(table.keys()) == ["img_0", "img_1", "img_2", "img_3", "img_4",
                                    "more/img_0", "more/img_1"]
    assert set(table.labels.tolist()) == {0}
    assert index.num_ignored == 1  # .DS_Store
    ok = run_pack("verify", dst, "--source", flat)
    assert ok.exit_code == 0, ok.output
    (flat / "img_4.jpg").unlink()
    missing = run_pack("verify", dst, "--source", flat)
    assert missing.exit_code == 1 and "img_4" in missing.output


def test_label_other_than_none_on_a_folder_is_refused(flat: Path, tmp_path: Path) -> None:
    result = run_pack("convert", flat, tmp_path / "out.wds", "--label", "cls")
    assert_one_line_error(result, 1, "--label cls", "only --label none")


def test_label_none_on_a_folder_without_images_says_so(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("no images")
    result = run_pack("convert", tmp_path / "empty", tmp_path / "out.wds", "--label", "none")
    assert_one_line_error(result, 1, "no images found", "1 other file")


# ---------------------------------------------------------------- --to and unused options


@pytest.mark.parametrize(("name", "fmt"), [("a.wds", "wds"), ("a.lmdb", "lmdb"),
                                           ("a.h5", "hdf5"), ("a.HDF5", "hdf5"),
                                           ("a.npy", "npy")])
def test_the_format_comes_from_the_suffix(src: Path, tmp_path: Path, name: str,
                                          fmt: str) -> None:
    result = run_pack("convert", src, tmp_path / name, "-q")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / name / "index.json").read_text())["format"] == fmt


def test_no_suffix_and_no_to_lists_the_suffixes(src: Path, tmp_path: Path) -> None:
    result = run_pack("convert", src, tmp_path / "out")
    assert_one_line_error(result, 2, "--to", ".wds", ".lmdb", ".h5", ".hdf5", ".npy")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--to", "lmdb", "--shard-size", "1GB"], ["--shard-size", "wds"]),
    (["--to", "hdf5", "--shard-samples", "10"], ["--shard-samples", "wds"]),
    (["--to", "wds", "--fit", "pad"], ["--fit", "--size"]),
    (["--to", "wds", "--upscale"], ["--upscale", "--resize"]),
    (["--to", "wds", "--quality", "50"], ["--quality", "re-encoded"]),
    (["--to", "npy", "--quality", "50"], ["--quality", "npy"]),
])
def test_options_that_do_not_apply_are_refused(src: Path, tmp_path: Path, args: list[str],
                                               words: list[str]) -> None:
    result = run_pack("convert", src, tmp_path / "out", *args)
    assert_one_line_error(result, 2, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--to", "wds", "--shard-size", "1GB"],
                                  ["--to", "npy", "--fit", "pad"],
                                  ["--to", "wds", "--resize", "8", "--upscale",
                                   "--quality", "70"]])
def test_options_that_apply_are_taken(src: Path, tmp_path: Path, args: list[str]) -> None:
    result = run_pack("convert", src, tmp_path / "out", *args, "-q")
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- summary and info


def test_the_summary_has_the_size_and_time(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "photos.wds"
    result = run_pack("convert", src, dst, "--shard-samples", "12", "-q")
    match = re.fullmatch(r"packed 24 samples into \S+ \(wds, 2 shards, ([0-9.]+) kB\) "
                         r"in [0-9.]+ s", result.stdout.strip())
    assert match, result.stdout
    written = sum(path.stat().st_size for path in dst.glob("*.tar"))
    assert float(match.group(1)) == pytest.approx(written / 1e3, abs=0.06)


def test_info_on_an_image_folder_says_how_to_pack_it(src: Path, tmp_path: Path) -> None:
    result = run_pack("info", src)
    assert_one_line_error(result, 1, "is not a packed dataset", "24 images in 3 class folders",
                          f"pack convert {src} OUT.wds --to wds")
    assert "did not finish" not in result.output
    write_images(tmp_path / "flat", 2)
    flat = run_pack("info", tmp_path / "flat")
    assert_one_line_error(flat, 1, "2 images at the top level", "--label none")


def test_info_on_an_unfinished_conversion_still_says_resume(tmp_path: Path) -> None:
    dst = tmp_path / "out"
    (dst / ".pack-state").mkdir(parents=True)
    (dst / "img.jpg").write_bytes(b"not a dataset image")
    assert_one_line_error(run_pack("info", dst), 1, "did not finish", "--resume")


# ---------------------------------------------------------------- resume messages


def interrupt(src: Path, dst: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wds conversion of `src` (a shard every 4 inputs) that dies after 13 records."""
    options = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0)
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=13):
        convert(src, dst, "wds", run=options)
    assert not (dst / "index.json").exists()


def test_resume_with_changed_options_names_the_change(src: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out.wds"
    interrupt(src, dst, monkeypatch)
    result = run_pack("convert", src, dst, "--shard-samples", "5", "--workers", "0",
                      "--resume")
    assert_one_line_error(result, 1, "changed since the interrupted run",
                          "--shard-samples was 4, now 5", "--overwrite")


def test_a_successful_resume_says_what_was_reused(src: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out.wds"
    interrupt(src, dst, monkeypatch)
    result = run_pack("convert", src, dst, "--shard-samples", "4", "--workers", "0",
                      "--resume", "-q")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    match = re.fullmatch(r"resumed: ([0-9]+) of 24 inputs were already packed", lines[0])
    assert match and 0 < int(match.group(1)) <= 13, lines
    assert lines[1].startswith("packed 24 samples into")
    fresh = run_pack("convert", src, tmp_path / "b.wds", "--resume", "-q")
    assert fresh.stdout.startswith("resumed: no inputs"), fresh.stdout


@pytest.mark.parametrize(("args", "size", "encode"), [
    ([], "varies (as in the source)", "pass-through (the original bytes); inputs checked: "
                                      "decode"),
    (["--resize", "16"], "varies (shorter side 16)", "resize shorter side 16, jpeg q90;"),
    (["--resize", "16", "--upscale", "--encode", "webp", "--quality", "70"],
     "varies (shorter side 16)", "resize shorter side 16 (small images enlarged), webp q70"),
    (["--size", "12x10", "--fit", "pad"], "12x10", "size 12x10 (pad), jpeg q90"),
])
def test_info_words_the_encode_settings(src: Path, tmp_path: Path, args: list[str],
                                        size: str, encode: str) -> None:
    dst = tmp_path / "out.wds"
    assert run_pack("convert", src, dst, *args, "-q").exit_code == 0
    lines = run_pack("info", dst).stdout.splitlines()
    assert f"image_size: {size}" in lines, lines
    shown = next(line for line in lines if line.startswith("encode: "))
    assert shown.startswith(f"encode: {encode}") and "{" not in shown, shown
    facts = json.loads(run_pack("info", dst, "--json").stdout)  # --json keeps the values
    assert isinstance(facts["encode"], dict)


def test_info_words_npy_pixels(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out.npy"
    assert run_pack("convert", src, dst, "--size", "8x6", "-q").exit_code == 0
    lines = run_pack("info", dst).stdout.splitlines()
    assert "image_size: 8x6" in lines
    assert "encode: raw RGB pixels 8x6 (crop); inputs checked: decode" in lines
