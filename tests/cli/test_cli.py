"""`pack convert / info` through click's CliRunner: output, options and errors.

`pack verify` finding damage: tests/cli/test_cli_verify.py; the size parsers:
tests/cli/test_cli_params.py.
"""


import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from packer import ConvertOptions, convert
from packer.core.index import INDEX_NAME, open_dataset
from packer.errors import SourceError
from tests.helpers import assert_one_line_error, run_pack, tree_hashes

# ---------------------------------------------------------------- help and normal use


@pytest.mark.parametrize("command", [[], ["convert"], ["info"], ["verify"]])
def test_help_texts_have_examples(command: list[str]) -> None:
    result = run_pack(*command, "--help")
    assert result.exit_code == 0
    assert "pack " in result.output and "Usage:" in result.output
    if command == ["convert"]:
        for option in ("--to", "--shard-size", "--resize", "--size", "--fit", "--encode",
                       "--quality", "--check", "--on-error", "--workers", "--resume",
                       "--overwrite"):
            assert option in result.output


def test_convert_info_verify(src: Path, tmp_path: Path) -> None:
    before = tree_hashes(src)
    dst = tmp_path / "out"
    result = run_pack("convert", src, dst, "--to", "lmdb", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(rf"packed 24 samples into {re.escape(str(dst))} \(lmdb, [0-9.]+ kB\) "
                        r"in [0-9.]+ s", result.stdout.strip())
    info = run_pack("info", dst)
    assert info.exit_code == 0
    assert "format: lmdb" in info.stdout and "num_samples: 24" in info.stdout
    assert "classes:\n  class_00: 8\n  class_01: 8\n  class_02: 8" in info.stdout
    facts = json.loads(run_pack("info", dst, "--json").stdout)
    assert facts["num_samples"] == 24 and facts["format"] == "lmdb"
    assert facts["classes"] == {"class_00": 8, "class_01": 8, "class_02": 8}
    assert facts["encode"]["mode"] == "passthrough"
    assert facts["num_rejected"] == 0 and facts["format_version"] == 2
    assert facts["shards"][0]["name"] == "data.lmdb/data.mdb"
    ok = run_pack("verify", dst, "--source", src)
    assert ok.exit_code == 0 and ok.stdout.startswith("ok: 24 samples")
    report = json.loads(run_pack("verify", dst, "--json").stdout)
    assert report["ok"] is True and report["problem"] is None
    assert tree_hashes(src) == before


def test_npy_options_and_info(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = run_pack("convert", src, dst, "--to", "npy", "--size", "24x32", "--fit", "pad",
                  "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    facts = json.loads(run_pack("info", dst, "--json").stdout)
    assert facts["image_size"] == [24, 32]
    assert facts["encode"]["fit"] == "pad" and facts["encode"]["mode"] == "pixels"
    assert run_pack("verify", dst, "--source", src).exit_code == 0


def test_reencode_options_reach_the_index(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = run_pack("convert", src, dst, "--to", "hdf5", "--resize", "32", "--encode", "webp",
                  "--quality", "60", "--upscale", "--check", "header", "--workers", "0")
    assert result.exit_code == 0, result.output
    encode = json.loads(run_pack("info", dst, "--json").stdout)["encode"]
    assert encode == {**encode, "resize": 32, "codec": "webp", "quality": 60, "upscale": True,
                      "check": "header", "mode": "reencode"}


def test_mixed_image_types_are_noted_once(src: Path, tmp_path: Path) -> None:
    """Column-based readers (HF datasets, Ray Data) refuse samples with different fields:
    `src` has PNGs among its JPEGs, stored as they are by default."""
    mixed = run_pack("convert", src, tmp_path / "mixed.wds", "--to", "wds", "--workers", "0")
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stderr.count("\n") == 1
    assert mixed.stderr.startswith("note: the shards mix image types (jpg, png)")
    assert "--encode jpeg" in mixed.stderr and "HF datasets, Ray Data" in mixed.stderr
    info = json.loads(run_pack("info", tmp_path / "mixed.wds", "--json").stdout)
    assert info["image_types"] == ["jpg", "png"] and info["wids_index"] == "mixed.wids.json"
    for args in (["--to", "wds", "--encode", "jpeg"], ["--to", "lmdb"]):
        uniform = run_pack("convert", src, tmp_path / f"out-{len(args)}", *args, "--workers", "0")
        assert uniform.exit_code == 0 and uniform.stderr == "", uniform.output


def test_shard_size_rolls_shards(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    assert run_pack("convert", src, dst, "--to", "wds", "--shard-size", "20KB",
                "--workers", "0").exit_code == 0
    index, table = open_dataset(dst)
    assert len(index.shards) > 2
    assert sum(shard.num_samples for shard in index.shards) == 24
    assert int(table.sizes.max()) < 15_000
    for shard in index.shards:  # ASCII names: no pax headers, so the limit holds exactly
        assert shard.num_bytes <= 20_000


# ---------------------------------------------------------------- user errors


def test_missing_source(tmp_path: Path) -> None:
    result = run_pack("convert", tmp_path / "nope", tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, "no such file or folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "value"), [("--size", "3y"), ("--size", "0x5"),
                                               ("--size", "10x10x10"),
                                               ("--shard-size", "lots"),
                                               ("--shard-size", "5XB")])
def test_bad_sizes(src: Path, tmp_path: Path, option: str, value: str) -> None:
    fmt = "wds" if option == "--shard-size" else "npy"  # the format the option applies to
    result = run_pack("convert", src, tmp_path / "out", "--to", fmt, option, value)
    assert_one_line_error(result, 2, repr(value))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--to", "npy", "--resize", "64"],
                                  ["--to", "wds", "--resume", "--overwrite"],
                                  ["--to", "wds", "--shard-size", "0"]])
def test_conflicting_options(src: Path, tmp_path: Path, args: list[str]) -> None:
    result = run_pack("convert", src, tmp_path / "out", *args)
    assert_one_line_error(result, 2)


def test_complete_destination_needs_overwrite(src: Path, packed_wds: Path) -> None:
    before = tree_hashes(packed_wds)
    result = run_pack("convert", src, packed_wds, "--to", "wds", "--shard-samples", "6")
    assert_one_line_error(result, 1, "already holds a complete dataset", "--overwrite")
    assert tree_hashes(packed_wds) == before


def test_overwrite_refused_for_a_foreign_file_removes_nothing(src: Path, packed_wds: Path,
                                                              tmp_path: Path) -> None:
    dst = tmp_path / "out.wds"
    shutil.copytree(packed_wds, dst)
    (dst / "mine.txt").write_text("keep me")
    before = tree_hashes(dst)
    result = run_pack("convert", src, dst, "--to", "wds", "--overwrite")
    assert_one_line_error(result, 1, "not empty", "mine.txt")
    assert tree_hashes(dst) == before  # the complete dataset too: refused before clearing


def test_foreign_files_in_destination_are_kept(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "mine.txt").write_text("keep me")
    result = run_pack("convert", src, dst, "--to", "wds", "--overwrite")
    assert_one_line_error(result, 1, "not empty", "mine.txt")
    assert (dst / "mine.txt").read_text() == "keep me"


def test_unfinished_destination_needs_resume(mixed_src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    failed = run_pack("convert", mixed_src, dst, "--to", "wds", "--on-error", "fail",
                  "--workers", "0")
    assert_one_line_error(failed, 1, "--on-error skip")
    assert not (dst / INDEX_NAME).exists()
    info = run_pack("info", dst)
    assert_one_line_error(info, 1, "did not finish", "--resume")
    assert_one_line_error(run_pack("verify", dst), 1, "did not finish")
    again = run_pack("convert", mixed_src, dst, "--to", "wds")
    assert_one_line_error(again, 1, "unfinished conversion", "--resume", "--overwrite")
    resumed = run_pack("convert", mixed_src, dst, "--to", "wds", "--resume", "--workers", "0")
    assert resumed.exit_code == 0, resumed.output
    assert "2 rejected inputs" in resumed.stdout


def test_info_on_a_missing_folder(tmp_path: Path) -> None:
    assert_one_line_error(run_pack("info", tmp_path / "nope"), 1, "no such dataset folder")


@pytest.mark.parametrize("inside", ["packed", "class_00/packed", "."])
def test_destination_inside_the_source_is_refused(writable_src: Path, inside: str) -> None:
    before = tree_hashes(writable_src)
    dst = writable_src / inside
    result = run_pack("convert", writable_src, dst, "--to", "wds")
    assert_one_line_error(result, 1, "inside the source folder")
    assert tree_hashes(writable_src) == before


def test_library_refuses_destination_inside_the_source(writable_src: Path) -> None:
    before = tree_hashes(writable_src)
    with pytest.raises(SourceError, match="inside the source"):
        convert(writable_src, writable_src / "packed", "wds", run=ConvertOptions(workers=0))
    assert tree_hashes(writable_src) == before


def test_a_ctrl_c_python_can_only_print_ends_as_interrupted(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A SIGINT landing in a weakref callback (a lazy import) after the command's own work
    is done: no printed traceback, but "interrupted" and exit 130, as anywhere else."""
    import weakref

    import pack_cli

    def interrupt(_: object) -> None:
        raise KeyboardInterrupt

    def command(**_: object) -> None:
        class Referent:
            pass

        referent = Referent()
        watcher = weakref.ref(referent, interrupt)
        del referent  # the callback raises: Python can only report it as unraisable
        assert watcher() is None
        sys.exit(0)

    monkeypatch.setattr(pack_cli.main, "main", command)
    with pytest.raises(SystemExit) as exited:
        pack_cli.run([])
    assert exited.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err and "KeyboardInterrupt" not in err
