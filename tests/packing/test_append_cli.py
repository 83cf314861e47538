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
