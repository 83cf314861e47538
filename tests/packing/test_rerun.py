"""Re-running finished work (invariant 9): `pack convert ... --resume` on a complete DST.

Made from the same source listing with the same options: "nothing to resume", exit 0,
not a byte nor an mtime changed, for every format. Another source or other options:
refused in one line that names what differs, DST untouched. A dataset written before
index.json recorded its job: refused, with --overwrite as the fix. (The URL DST is
tested in tests/reading/test_remote.py, a kill after index.json in
tests/faults/test_faults_kill.py.)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pack_cli import main
from packer.conversion.identity import JOB_KEY
from packer.core.index import INDEX_NAME

# Options per format that give several parts where the format has parts.
ARGS = {"wds": ["--shard-samples", "6"], "lmdb": [], "hdf5": [], "npy": ["--size", "16x16"]}
# In place of ARGS: one option changed, and how the refusal names it.
OTHER = {"wds": (["--shard-samples", "7"], "--shard-samples was 6, now 7"),
         "lmdb": (["--check", "header"], "--check was decode, now header"),
         "hdf5": (["--resize", "32"], "--resize was none, now 32"),
         "npy": (["--size", "20x20"], "--size was 16x16, now 20x20")}


def pack(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def convert_args(src: Path, dst: Path, fmt: str, *more: str) -> list[str | Path]:
    return ["convert", src, dst, "--to", fmt, "--workers", "0", "-q", *more]


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Relative path -> (mtime_ns, bytes) of every file, hidden ones included."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_line_error(result: Result, *words: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, \
        result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


@pytest.fixture(scope="module", params=list(ARGS))
def finished(request: pytest.FixtureRequest, mixed_src: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(format, DST): `mixed_src` converted completely, once per format."""
    fmt = request.param
    dst = tmp_path_factory.mktemp("finished") / f"out.{fmt}"
    result = pack(*convert_args(mixed_src, dst, fmt, *ARGS[fmt]))
    assert result.exit_code == 0, result.output
    return fmt, dst


def test_resume_of_a_finished_conversion_does_nothing(finished: tuple[str, Path],
                                                      mixed_src: Path) -> None:
    fmt, dst = finished
    before = snapshot(dst)
    for _ in range(2):  # a retry loop may run it again and again
        result = pack(*convert_args(mixed_src, dst, fmt, *ARGS[fmt], "--resume"))
        assert result.exit_code == 0, result.output
        assert result.stdout == f"nothing to resume: {dst} is complete (40 samples)\n"
        assert snapshot(dst) == before


def test_resume_with_other_options_names_them(finished: tuple[str, Path],
                                              mixed_src: Path) -> None:
    fmt, dst = finished
    before = snapshot(dst)
    other_args, named = OTHER[fmt]  # in place of ARGS[fmt]
    result = pack(*convert_args(mixed_src, dst, fmt, *other_args, "--resume"))
    assert_one_line_error(result, str(dst), "with other options", named, "--overwrite")
    assert snapshot(dst) == before


def test_resume_into_another_format_is_refused(finished: tuple[str, Path],
                                               mixed_src: Path) -> None:
    fmt, dst = finished
    other = "lmdb" if fmt != "lmdb" else "hdf5"
    result = pack(*convert_args(mixed_src, dst, other, "--resume"))
    assert_one_line_error(result, f"--to was {fmt}, now {other}")


def test_resume_from_a_changed_source_is_refused(mixed_src: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(mixed_src, src)
    dst = tmp_path / "out.wds"
    assert pack(*convert_args(src, dst, "wds")).exit_code == 0
    image = next(src.glob("class_00/*.jpg"))
    shutil.copy(image, image.with_name("added.jpg"))
    result = pack(*convert_args(src, dst, "wds", "--resume"))
    assert_one_line_error(result, "from another source", "42 inputs then, 43 now")
    (src / "class_00" / "added.jpg").unlink()
    os.utime(image, ns=(0, 0))  # same listing, one file touched
    result = pack(*convert_args(src, dst, "wds", "--resume", "--shard-samples", "7"))
    assert_one_line_error(result, "from another source and with other options",
                          "the same 42 inputs, but files", "--shard-samples was none, now 7")


def test_a_dataset_without_a_job_record_is_refused(mixed_src: Path, tmp_path: Path) -> None:
    """Written before index.json kept the job: --resume cannot match it, --overwrite can."""
    dst = tmp_path / "out.wds"
    assert pack(*convert_args(mixed_src, dst, "wds")).exit_code == 0
    index = json.loads((dst / INDEX_NAME).read_text())
    del index["extra"][JOB_KEY]
    (dst / INDEX_NAME).write_text(json.dumps(index))
    result = pack(*convert_args(mixed_src, dst, "wds", "--resume"))
    assert_one_line_error(result, "does not record its source and options", "--overwrite")
    assert pack(*convert_args(mixed_src, dst, "wds", "--overwrite")).exit_code == 0
    assert pack(*convert_args(mixed_src, dst, "wds", "--resume")).exit_code == 0


def test_without_resume_a_complete_dst_is_still_refused(finished: tuple[str, Path],
                                                        mixed_src: Path) -> None:
    fmt, dst = finished
    result = pack(*convert_args(mixed_src, dst, fmt, *ARGS[fmt]))
    assert_one_line_error(result, "already holds a complete dataset", "--overwrite")
