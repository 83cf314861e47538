"""`pack append` through click's CliRunner: the summary line, the new classes, the
no-op rerun, refused options and an interrupted append, each in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.append_support import make_sources, pack
from tests.helpers import assert_one_line_error, run_pack


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_sources(tmp_path_factory.mktemp("append-cli"))


def test_append_then_verify_then_rerun(sources: tuple[Path, Path], tmp_path: Path) -> None:
    dst = tmp_path / "ds.wds"
    pack(sources[0], dst, "wds")
    result = run_pack("append", sources[1], dst, "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"appended 20 new samples (44 in all); new classes: a_first, "
                             f"class_03 (labels 3, 4) to {dst}\n")
    verified = run_pack("verify", dst, "--source", sources[1])
    assert verified.exit_code == 0, verified.output
    again = run_pack("append", sources[1], dst, "--workers", "0", "-q")
    assert again.exit_code == 0
    assert again.stdout == f"appended 0 new samples (44 in all) to {dst}\n"


def test_conflicting_option_is_one_line(sources: tuple[Path, Path], tmp_path: Path) -> None:
    dst = tmp_path / "ds.npy"
    pack(sources[0], dst, "npy")
    result = run_pack("append", sources[1], dst, "--size", "32x32", "-q")
    assert_one_line_error(result, 2, "--size 32x32 conflicts with DST's 24x24")
    ok = run_pack("append", sources[1], dst, "--size", "24x24", "--workers", "0", "-q")
    assert ok.exit_code == 0 and "20 new samples" in ok.stdout


def test_interrupted_append_asks_for_resume(sources: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    dst = tmp_path / "ds.lmdb"
    pack(sources[0], dst, "lmdb")
    (dst / ".pack-append").mkdir()  # what a kill during the staging's start leaves
    result = run_pack("append", sources[1], dst, "-q")
    assert_one_line_error(result, 1, "an append was interrupted: rerun with --resume")
    resumed = run_pack("append", sources[1], dst, "--resume", "--workers", "0", "-q")
    assert resumed.exit_code == 0 and "20 new samples" in resumed.stdout
    assert not (dst / ".pack-append").exists()


def test_append_on_no_dataset_is_one_line(sources: tuple[Path, Path], tmp_path: Path) -> None:
    shutil.copytree(sources[0], tmp_path / "not-packed")
    result = run_pack("append", sources[1], tmp_path / "missing", "-q")
    assert_one_line_error(result, 1, "no such dataset folder")


def test_replace_names_the_samples_and_verifies(sources: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources[0], src)
    dst = tmp_path / "ds.lmdb"
    pack(src, dst, "lmdb")
    images = sorted(src.rglob("*.jpg"))
    shutil.copy(images[1], images[0])
    key = images[0].relative_to(src).with_suffix("").as_posix()
    refused = run_pack("append", src, dst, "--workers", "0", "-q")
    assert refused.exit_code == 0 and "1 rejected inputs" in refused.stdout
    result = run_pack("append", src, dst, "--replace", "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"appended 0 new samples (24 in all); replaced 1 samples in place: {key} to {dst}",
        "the replaced samples keep their indices with new bytes: a reader state saved "
        "before the append reads the new samples there"]
    verified = run_pack("verify", dst, "--source", src)
    assert verified.exit_code == 0, verified.output


def test_drop_duplicates_keeps_dst_sample(sources: tuple[Path, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources[0], src)
    dst = tmp_path / "ds.wds"
    pack(src, dst, "wds")
    first = sorted(src.rglob("*.jpg"))[0]
    shutil.copy(first, src / "class_01" / "copy_of_first.jpg")
    result = run_pack("append", src, dst, "--drop-duplicates", "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    assert "0 new samples" in result.stdout and "1 rejected inputs" in result.stdout
    reasons = (dst / "rejects.jsonl").read_text()
    key = first.relative_to(src).with_suffix("").as_posix()
    assert f"duplicate of {key!r}" in reasons
    plain = run_pack("append", src, dst, "--workers", "0", "-q")
    assert "1 new samples" in plain.stdout  # without the option it is a sample


def test_a_field_type_mismatch_is_one_line(tmp_path: Path) -> None:
    from tests.helpers import png_bytes, random_image

    for i in range(4):
        (tmp_path / f"img{i}.png").write_bytes(png_bytes(random_image(8, 8, seed=i)))
    rows = "".join(f"img{i}.png,c{i % 2},{i}.5\n" for i in range(3))
    (tmp_path / "a.csv").write_text("path,label,score\n" + rows)
    dst = tmp_path / "ds.wds"
    made = run_pack("convert", tmp_path / "a.csv", dst, "--to", "wds", "--field", "score:float",
                    "-q")
    assert made.exit_code == 0, made.output
    (tmp_path / "b.csv").write_text("path,label,score\n" + rows + "img3.png,c1,4.5\n")
    result = run_pack("append", tmp_path / "b.csv", dst, "-q")
    assert_one_line_error(result, 1, "field 'score' is str in SRC and float in")
    ok = run_pack("append", tmp_path / "b.csv", dst, "--field", "score:float", "--workers",
                  "0", "-q")
    assert ok.exit_code == 0 and "1 new samples" in ok.stdout, ok.output
    assert run_pack("verify", dst, "--source", tmp_path / "b.csv").exit_code == 0


def test_overwrite_replaces_a_dataset_with_an_interrupted_append(sources: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    dst = tmp_path / "ds.lmdb"
    pack(sources[0], dst, "lmdb")
    staged = dst / ".pack-append"
    staged.mkdir()  # what an interrupted append leaves, with what it staged
    (staged / "staged.json").write_text("{}")
    (dst / ".pack-append.done").mkdir()  # and a finished one's, not yet deleted
    result = run_pack("convert", sources[1], dst, "--to", "lmdb", "--overwrite",
                      "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    assert not staged.exists() and not (dst / ".pack-append.done").exists()
    assert (dst / "index.json").is_file()
