"""Resume and `pack verify --source` on archive sources (never modified)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import convert
from packer.api import verify
from packer.conversion.journal import ResumeRefused
from packer.core.index import INDEX_NAME, read_index
from tests.archive_support import (
    MAKERS,
    RESUME,
    WDS,
    make_tar,
    make_zip,
    sha256,
)
from tests.helpers import count_adds, jpeg_bytes, random_image, tree_hashes


@pytest.mark.parametrize("kind", ["tar", "tgz", "tgz-any-order"])
def test_resume_after_interruption_is_byte_identical(mixed_src: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(mixed_src, tmp_path / f"train{suffix}")
    before = sha256(archive)
    convert(archive, tmp_path / "ref" / "out", "wds", run=WDS)
    dst = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=13):
        convert(archive, dst, "wds", run=WDS)
    assert not (dst / INDEX_NAME).exists()
    with count_adds(monkeypatch, "wds") as adds:
        convert(archive, dst, "wds", run=RESUME)
    assert adds[0] == 40 - 12  # 3 shards of 4 were durable
    assert tree_hashes(dst) == tree_hashes(tmp_path / "ref" / "out")
    assert sha256(archive) == before


def test_resume_refuses_a_changed_archive(src: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    archive = make_tar(src, tmp_path / "train.tar")
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, "wds", fail_after=5):
        convert(archive, tmp_path / "out", "wds", run=WDS)
    stat = archive.stat()
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    with pytest.raises(ResumeRefused, match="source or the options changed"):
        convert(archive, tmp_path / "out", "wds", run=RESUME)


def test_resume_of_complete_dataset_is_a_noop(src: Path, tmp_path: Path) -> None:
    archive = make_zip(src, tmp_path / "train.zip")
    convert(archive, tmp_path / "out", "lmdb")
    result = CliRunner().invoke(main, ["convert", str(archive), str(tmp_path / "out"),
                                       "--to", "lmdb", "--resume"])
    assert result.exit_code == 0 and "nothing to resume" in result.output, result.output


@pytest.mark.parametrize("kind", list(MAKERS))
def test_verify_against_the_archive(mixed_src: Path, tmp_path: Path, kind: str) -> None:
    maker, suffix = MAKERS[kind]
    archive = maker(mixed_src, tmp_path / f"train{suffix}")
    out = tmp_path / "out.wds"
    convert(archive, out, "wds", run=WDS)
    assert read_index(out).num_rejected == 2  # the empty and the text file
    result = CliRunner().invoke(main, ["verify", str(out), "--source", str(archive)])
    assert result.exit_code == 0, result.output


def test_verify_finds_a_member_that_changed(src: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    archive = make_tar(copy, tmp_path / "train.tar")
    convert(archive, tmp_path / "out", "hdf5")
    assert verify(tmp_path / "out", archive).ok
    changed = sorted(copy.rglob("*.jpg"))[0]
    changed.write_bytes(jpeg_bytes(random_image(20, 20)))
    report = verify(tmp_path / "out", make_tar(copy, tmp_path / "changed.tar"))
    assert not report.ok and "bytes differ" in str(report.problem)
