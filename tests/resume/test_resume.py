"""Resume details: what is kept, what is redone, and when a resume is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import pack_cli
import pack_cli._convert
from pack_cli import main
from packer import ConvertOptions, EncodeOptions, convert
from packer.conversion.journal import STATE_DIR, ResumeRefused
from packer.core.index import INDEX_NAME
from packer.errors import PackError
from packer.formats import _npy
from packer.formats.base import ShardOptions
from packer.testing import make_sample_folder
from tests.helpers import count_adds, pack_command, tree_hashes, wait_for_state

WDS = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0)
RESUME = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0, resume=True)


def interrupted(src: Path, dst: Path, monkeypatch: pytest.MonkeyPatch, fmt: str = "wds",
                after: int = 13) -> None:
    """Run a conversion that dies in the writer after `after` records."""
    with pytest.raises(RuntimeError, match="injected"), \
            count_adds(monkeypatch, fmt, fail_after=after):
        convert(src, dst, fmt, run=WDS)
    assert not (dst / INDEX_NAME).exists()


@pytest.fixture
def reference(mixed_src: Path, tmp_path: Path) -> dict[str, str]:
    """An uninterrupted run into a folder named as the tests' DST: shards carry its name."""
    convert(mixed_src, tmp_path / "ref" / "out", "wds", run=WDS)
    return tree_hashes(tmp_path / "ref" / "out")


def parts(dst: Path) -> list[str]:
    return (dst / STATE_DIR / "parts.jsonl").read_text().splitlines()


def test_resume_keeps_durable_shards(mixed_src: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     reference: dict[str, str]) -> None:
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch)
    assert len(parts(dst)) == 3  # 3 shards of 4 ended before the 13th record
    with count_adds(monkeypatch, "wds") as adds:
        convert(mixed_src, dst, "wds", run=RESUME)
    assert adds[0] == 40 - 12
    assert tree_hashes(dst) == reference


def test_torn_last_journal_line_is_ignored(mixed_src: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           reference: dict[str, str]) -> None:
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch)
    with open(dst / STATE_DIR / "parts.jsonl", "a") as handle:
        handle.write('{"part": 3, "src_st')
    convert(mixed_src, dst, "wds", run=RESUME)
    assert tree_hashes(dst) == reference


@pytest.mark.parametrize("damage", ["flip", "delete", "truncate"])
def test_damaged_shard_is_redone(mixed_src: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch, reference: dict[str, str],
                                 damage: str) -> None:
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch)
    shard = dst / "out-00001.tar"
    if damage == "flip":
        data = bytearray(shard.read_bytes())
        data[700] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage == "delete":
        shard.unlink()
    else:
        os.truncate(shard, 1024)
    with count_adds(monkeypatch, "wds") as adds:
        convert(mixed_src, dst, "wds", run=RESUME)
    assert adds[0] == 40 - 4  # only the first shard was kept
    assert tree_hashes(dst) == reference


def test_changed_source_refuses_resume(mixed_src: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    src = tmp_path / "src"
    shutil.copytree(mixed_src, src)
    dst = tmp_path / "out"
    interrupted(src, dst, monkeypatch)
    victim = src / "class_00" / "img_000000.jpg"
    victim.write_bytes(victim.read_bytes() + b"\0")
    with pytest.raises(ResumeRefused, match="--overwrite"):
        convert(src, dst, "wds", run=RESUME)
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--to", "wds",
                                       "--shard-samples", "4", "--resume"])
    assert result.exit_code == 1 and "changed since the interrupted run" in result.stderr
    assert isinstance(ResumeRefused("x"), PackError)


def test_changed_options_refuse_resume(mixed_src: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch)
    other = ConvertOptions(shards=ShardOptions(max_samples=5), workers=0, resume=True)
    with pytest.raises(ResumeRefused):
        convert(mixed_src, dst, "wds", run=other)


def test_worker_count_does_not_matter_for_resume(mixed_src: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 reference: dict[str, str]) -> None:
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch)
    convert(mixed_src, dst, "wds", run=ConvertOptions(shards=ShardOptions(max_samples=4),
                                                      workers=2, resume=True))
    assert tree_hashes(dst) == reference


def test_state_without_job_record_starts_over(mixed_src: Path, tmp_path: Path,
                                              reference: dict[str, str]) -> None:
    # Killed inside Journal.start: the state folder exists, job.json does not yet.
    dst = tmp_path / "out"
    (dst / STATE_DIR).mkdir(parents=True)
    convert(mixed_src, dst, "wds", run=RESUME)
    assert tree_hashes(dst) == reference


def test_resume_of_a_new_destination_is_a_fresh_run(mixed_src: Path, tmp_path: Path,
                                                    reference: dict[str, str]) -> None:
    convert(mixed_src, tmp_path / "new" / "out", "wds", run=RESUME)
    assert tree_hashes(tmp_path / "new" / "out") == reference


def test_npy_missing_partial_file_is_not_resumed_as_zeros(
        mixed_src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_npy, "PART_SAMPLES", 4)
    convert(mixed_src, tmp_path / "ref", "npy", run=WDS)
    dst = tmp_path / "out"
    interrupted(mixed_src, dst, monkeypatch, fmt="npy")
    (dst / "images.npy.partial").unlink()
    try:
        convert(mixed_src, dst, "npy", run=RESUME)
    except PackError as exc:  # refusing is fine; it must say how to recover
        assert "--overwrite" in str(exc)
    else:
        assert tree_hashes(dst) == tree_hashes(tmp_path / "ref")


def test_ctrl_c_exits_130_with_a_resume_hint(src: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pack_cli._convert, "convert", interrupt)
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "out"), "--to",
                                       "wds"])
    assert result.exit_code == 130
    assert "--resume" in result.stderr


def test_journal_is_removed_when_complete(src: Path, tmp_path: Path) -> None:
    convert(src, tmp_path / "out", "wds", run=WDS)
    assert not (tmp_path / "out" / STATE_DIR).exists()
    names = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert names == ["index.json", "keys.npy", *[f"out-{i:05d}.tar" for i in range(6)],
                     "out.wids.json", "rejects.jsonl", "samples.npy"]
    index = json.loads((tmp_path / "out" / INDEX_NAME).read_text())
    assert index["num_samples"] == 24


@pytest.mark.timeout(60)
def test_sigint_exits_promptly_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C: exit 130 with a hint within seconds, no process left; --resume finishes."""
    src = make_sample_folder(tmp_path / "src", count=150, classes=2, min_side=160,
                             max_side=320)
    options = EncodeOptions(size=(64, 64))
    reference = tmp_path / "ref"
    convert(src, reference, "npy", options, ConvertOptions(workers=0))
    dst = tmp_path / "out"
    argv = [*pack_command(), "convert", str(src), str(dst), "--to", "npy", "--size", "64x64",
            "--workers", "2", "-q"]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, start_new_session=True)
    wait_for_state(proc, dst)
    while proc.poll() is None and not (dst / "images.npy.partial").exists():
        time.sleep(0.001)  # the journal comes before the writer: wait for the writer too
    time.sleep(0.05)  # into the encoding
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)  # a hang fails here
    with pytest.raises(ProcessLookupError):  # nothing of its process group is left
        os.killpg(proc.pid, 0)
    if (dst / INDEX_NAME).exists():  # it finished before the signal landed: in the summary
        # (exit 130) or in the interpreter's shutdown, when Python's handler is gone (-2)
        assert proc.returncode in (0, 130, -signal.SIGINT), stderr.decode()
        assert b"Traceback" not in stderr
        assert tree_hashes(dst) == tree_hashes(reference)
        return
    assert proc.returncode == 130, stderr.decode()
    assert b"--resume" in stderr and b"Traceback" not in stderr
    assert not (dst / INDEX_NAME).exists()
    # the pixels written so far are kept: still partial, or renamed just before index.json
    assert (dst / "images.npy.partial").exists() or (dst / "images.npy").exists()
    convert(src, dst, "npy", options, ConvertOptions(workers=0, resume=True))
    assert tree_hashes(dst) == tree_hashes(reference)
