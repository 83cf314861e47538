"""`pack convert / info / verify` through click's CliRunner: output, errors, damage found."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from pack_cli import main
from pack_cli._params import UNITS, parse_bytes, parse_size
from packer import ConvertOptions, convert
from packer.core.index import INDEX_NAME, open_dataset
from packer.errors import SourceError
from tests.helpers import shard_path, tree_hashes


def pack(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stderr.startswith("error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                     SystemExit)
    for word in words:
        assert word in result.stderr, (word, result.stderr)


@pytest.fixture(scope="module")
def packed(src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wds dataset of `src` in 4 shards; tests copy it before damaging it."""
    dst = tmp_path_factory.mktemp("packed") / "out.wds"
    result = pack("convert", src, dst, "--to", "wds", "--shard-samples", "6", "--workers", "0")
    assert result.exit_code == 0, result.output
    return dst


@pytest.fixture
def copy(packed: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy.wds"
    shutil.copytree(packed, dst)
    return dst


# ---------------------------------------------------------------- help and normal use


@pytest.mark.parametrize("command", [[], ["convert"], ["info"], ["verify"]])
def test_help_texts_have_examples(command: list[str]) -> None:
    result = pack(*command, "--help")
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
    result = pack("convert", src, dst, "--to", "lmdb", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"packed 24 samples into {dst} (lmdb, 1 shard(s))"
    info = pack("info", dst)
    assert info.exit_code == 0
    assert "format: lmdb" in info.stdout and "num_samples: 24" in info.stdout
    assert "classes:\n  class_00: 8\n  class_01: 8\n  class_02: 8" in info.stdout
    facts = json.loads(pack("info", dst, "--json").stdout)
    assert facts["num_samples"] == 24 and facts["format"] == "lmdb"
    assert facts["classes"] == {"class_00": 8, "class_01": 8, "class_02": 8}
    assert facts["encode"]["mode"] == "passthrough"
    assert facts["num_rejected"] == 0 and facts["format_version"] == 1
    assert facts["shards"][0]["name"] == "data.lmdb/data.mdb"
    ok = pack("verify", dst, "--source", src)
    assert ok.exit_code == 0 and ok.stdout.startswith("ok: 24 samples")
    report = json.loads(pack("verify", dst, "--json").stdout)
    assert report["ok"] is True and report["problem"] is None
    assert tree_hashes(src) == before


def test_npy_options_and_info(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = pack("convert", src, dst, "--to", "npy", "--size", "24x32", "--fit", "pad",
                  "--workers", "0", "-q")
    assert result.exit_code == 0, result.output
    facts = json.loads(pack("info", dst, "--json").stdout)
    assert facts["image_size"] == [24, 32]
    assert facts["encode"]["fit"] == "pad" and facts["encode"]["mode"] == "pixels"
    assert pack("verify", dst, "--source", src).exit_code == 0


def test_reencode_options_reach_the_index(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = pack("convert", src, dst, "--to", "hdf5", "--resize", "32", "--encode", "webp",
                  "--quality", "60", "--upscale", "--check", "header", "--workers", "0")
    assert result.exit_code == 0, result.output
    encode = json.loads(pack("info", dst, "--json").stdout)["encode"]
    assert encode == {**encode, "resize": 32, "codec": "webp", "quality": 60, "upscale": True,
                      "check": "header", "mode": "reencode"}


def test_mixed_image_types_are_noted_once(src: Path, tmp_path: Path) -> None:
    """Column-based readers (HF datasets, Ray Data) refuse samples with different fields:
    `src` has PNGs among its JPEGs, stored as they are by default."""
    mixed = pack("convert", src, tmp_path / "mixed.wds", "--to", "wds", "--workers", "0")
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stderr.count("\n") == 1
    assert mixed.stderr.startswith("note: the shards mix image types (jpg, png)")
    assert "--encode jpeg" in mixed.stderr and "HF datasets, Ray Data" in mixed.stderr
    info = json.loads(pack("info", tmp_path / "mixed.wds", "--json").stdout)
    assert info["image_types"] == ["jpg", "png"] and info["wids_index"] == "mixed.wids.json"
    for args in (["--to", "wds", "--encode", "jpeg"], ["--to", "lmdb"]):
        uniform = pack("convert", src, tmp_path / f"out-{len(args)}", *args, "--workers", "0")
        assert uniform.exit_code == 0 and uniform.stderr == "", uniform.output


def test_shard_size_rolls_shards(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    assert pack("convert", src, dst, "--to", "wds", "--shard-size", "20KB",
                "--workers", "0").exit_code == 0
    index, table = open_dataset(dst)
    assert len(index.shards) > 2
    assert sum(shard.num_samples for shard in index.shards) == 24
    assert int(table.sizes.max()) < 15_000
    for shard in index.shards:  # ASCII names: no pax headers, so the limit holds exactly
        assert shard.num_bytes <= 20_000


# ---------------------------------------------------------------- user errors


def test_missing_source(tmp_path: Path) -> None:
    result = pack("convert", tmp_path / "nope", tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, "no such file or folder")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "value"), [("--size", "3y"), ("--size", "0x5"),
                                               ("--size", "10x10x10"),
                                               ("--shard-size", "lots"),
                                               ("--shard-size", "5XB")])
def test_bad_sizes(src: Path, tmp_path: Path, option: str, value: str) -> None:
    result = pack("convert", src, tmp_path / "out", "--to", "npy", option, value)
    assert_one_line_error(result, 2, repr(value))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--to", "npy", "--resize", "64"],
                                  ["--to", "wds", "--resume", "--overwrite"],
                                  ["--to", "wds", "--shard-size", "0"]])
def test_conflicting_options(src: Path, tmp_path: Path, args: list[str]) -> None:
    result = pack("convert", src, tmp_path / "out", *args)
    assert_one_line_error(result, 2)


def test_complete_destination_needs_overwrite(src: Path, packed: Path) -> None:
    before = tree_hashes(packed)
    result = pack("convert", src, packed, "--to", "wds", "--shard-samples", "6")
    assert_one_line_error(result, 1, "already holds a complete dataset", "--overwrite")
    assert tree_hashes(packed) == before


def test_foreign_files_in_destination_are_kept(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "mine.txt").write_text("keep me")
    result = pack("convert", src, dst, "--to", "wds", "--overwrite")
    assert_one_line_error(result, 1, "not empty", "mine.txt")
    assert (dst / "mine.txt").read_text() == "keep me"


def test_unfinished_destination_needs_resume(mixed_src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    failed = pack("convert", mixed_src, dst, "--to", "wds", "--on-error", "fail",
                  "--workers", "0")
    assert_one_line_error(failed, 1, "--on-error skip")
    assert not (dst / INDEX_NAME).exists()
    info = pack("info", dst)
    assert_one_line_error(info, 1, "did not finish", "--resume")
    assert_one_line_error(pack("verify", dst), 1, "did not finish")
    again = pack("convert", mixed_src, dst, "--to", "wds")
    assert_one_line_error(again, 1, "unfinished conversion", "--resume", "--overwrite")
    resumed = pack("convert", mixed_src, dst, "--to", "wds", "--resume", "--workers", "0")
    assert resumed.exit_code == 0, resumed.output
    assert "2 rejected inputs" in resumed.stdout


def test_info_on_a_missing_folder(tmp_path: Path) -> None:
    assert_one_line_error(pack("info", tmp_path / "nope"), 1, "no such dataset folder")


# ---------------------------------------------------------------- verify finds damage


def verify_fails(dst: Path, *words: str) -> None:
    result = pack("verify", dst)
    assert_one_line_error(result, 1, *words)
    report = json.loads(pack("verify", dst, "--json").stdout)
    assert report["ok"] is False
    for word in words:
        assert word in report["problem"]


def test_verify_names_a_truncated_shard(copy: Path) -> None:
    shard = shard_path(copy, 1)
    os.truncate(shard, shard.stat().st_size - 700)
    verify_fails(copy, "out-00001.tar", "truncated")


def test_verify_names_a_flipped_byte(copy: Path) -> None:
    index, table = open_dataset(copy)
    sample = int(index.shard_starts[2]) + 1  # second sample of the third shard
    flip(shard_path(copy, 2), int(table.offsets[sample]) + 10)
    verify_fails(copy, "out-00002.tar")


def test_verify_names_a_deleted_shard(copy: Path) -> None:
    shard_path(copy, 3).unlink()
    verify_fails(copy, "out-00003.tar", "missing")


def test_verify_names_swapped_shards(copy: Path) -> None:
    first, second = shard_path(copy, 0), shard_path(copy, 1)
    first.rename(copy / "tmp.tar")
    second.rename(first)
    (copy / "tmp.tar").rename(second)
    verify_fails(copy, "out-00000.tar")


def test_verify_checks_each_sample_even_when_the_index_was_patched(copy: Path) -> None:
    # Damage a sample and fix the shard's sha256 in index.json: the per-sample digest
    # still names the shard and the sample.
    index, table = open_dataset(copy)
    sample = int(index.shard_starts[1])
    shard = shard_path(copy, 1)
    flip(shard, int(table.offsets[sample]) + 5)
    data = json.loads((copy / INDEX_NAME).read_text())
    data["shards"][1]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (copy / INDEX_NAME).write_text(json.dumps(data))
    verify_fails(copy, "out-00001.tar", f"sample {sample}", table.key(sample))


@pytest.mark.parametrize(("edit", "words"), [
    ("bad json", ("index.json", "not valid JSON")),
    ("count", ("index.json", "num_samples=25")),
    ("version", ("index.json", "format_version 99")),
    ("format", ("index.json", "unknown format 'zip'")),
    ("missing field", ("index.json", "missing or bad field")),
])
def test_verify_names_a_damaged_index(copy: Path, edit: str, words: tuple[str, ...]) -> None:
    path = copy / INDEX_NAME
    data = json.loads(path.read_text())
    if edit == "bad json":
        path.write_text(path.read_text()[:-20])
    else:
        if edit == "count":
            data["num_samples"] += 1
        elif edit == "version":
            data["format_version"] = 99
        elif edit == "format":
            data["format"] = "zip"
        else:
            del data["class_names"]
        path.write_text(json.dumps(data))
    verify_fails(copy, *words)
    assert_one_line_error(pack("info", copy), 1, *words)


def test_verify_names_a_missing_sample_table(copy: Path) -> None:
    (copy / "samples.npy").unlink()
    verify_fails(copy, "samples.npy")


@pytest.mark.parametrize(("fmt", "name"), [("lmdb", "data.lmdb/data.mdb"),
                                           ("hdf5", "data.h5"), ("npy", "images.npy"),
                                           ("npy", "labels.npy")])
def test_verify_names_damage_in_other_formats(src: Path, tmp_path: Path, fmt: str,
                                              name: str) -> None:
    dst = tmp_path / "out"
    args = ["--size", "16x16"] if fmt == "npy" else []
    assert pack("convert", src, dst, "--to", fmt, "--workers", "0", *args).exit_code == 0
    path = dst / name
    flip(path, path.stat().st_size - (8 if name == "labels.npy" else 300))
    verify_fails(dst, name)


def test_verify_against_a_changed_source(src: Path, packed: Path, tmp_path: Path) -> None:
    changed = tmp_path / "src"
    shutil.copytree(src, changed)
    assert pack("verify", packed, "--source", changed).exit_code == 0
    victim = sorted((changed / "class_01").iterdir())[2]
    victim.write_bytes(victim.read_bytes() + b"\0")
    assert_one_line_error(pack("verify", packed, "--source", changed), 1, victim.name,
                          "bytes differ")
    victim.unlink()
    added = changed / "class_02" / "new.jpg"
    shutil.copy(sorted((changed / "class_00").iterdir())[0], added)
    assert_one_line_error(pack("verify", packed, "--source", changed), 1, "new.jpg",
                          "not in")


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


# ---------------------------------------------------------------- parsing (property tests)


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(sorted(UNITS)),
       st.booleans())
def test_parse_bytes_integers(number: int, unit: str, lower: bool) -> None:
    text = f"{number}{unit.lower() if lower else unit}"
    assert parse_bytes(text) == number * UNITS[unit]


@given(st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False,
                   allow_infinity=False), st.sampled_from(["KB", "MB", "GB", "KiB", "MiB"]))
def test_parse_bytes_fractions_round_to_the_nearest_byte(number: Decimal, unit: str) -> None:
    exact = number * UNITS[unit.upper()]
    assert abs(parse_bytes(f"{number}{unit}") - exact) <= Decimal("0.5")


@given(st.text(max_size=12))
def test_parse_bytes_rejects_or_returns_a_count(text: str) -> None:
    try:
        value = parse_bytes(text)
    except click.BadParameter as exc:
        assert repr(text) in exc.message
    else:
        assert isinstance(value, int) and value >= 0


@given(st.integers(min_value=1, max_value=10**5), st.integers(min_value=1, max_value=10**5))
def test_parse_size(height: int, width: int) -> None:
    assert parse_size(f"{height}x{width}") == (height, width)
    assert parse_size(f"{height}X{width}") == (height, width)
    assert parse_size(str(height)) == (height, height)
    assert parse_size(None) is None


@given(st.text(max_size=12))
def test_parse_size_rejects_or_returns_positive_sides(text: str) -> None:
    try:
        size = parse_size(text)
    except click.BadParameter as exc:
        assert repr(text) in exc.message
    else:
        assert size is not None and min(size) > 0


@pytest.mark.parametrize("inside", ["packed", "class_00/packed", "."])
def test_destination_inside_the_source_is_refused(writable_src: Path, inside: str) -> None:
    before = tree_hashes(writable_src)
    dst = writable_src / inside
    result = pack("convert", writable_src, dst, "--to", "wds")
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
