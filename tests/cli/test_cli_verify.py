"""`pack verify` through click's CliRunner: every kind of damage is found and named."""


import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from packer.core.index import INDEX_NAME, open_dataset
from tests.helpers import assert_one_line_error, run_pack, shard_path


@pytest.fixture
def copy(packed_wds: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy.wds"
    shutil.copytree(packed_wds, dst)
    return dst


# ---------------------------------------------------------------- verify finds damage


def verify_fails(dst: Path, *words: str) -> None:
    result = run_pack("verify", dst)
    assert_one_line_error(result, 1, *words)
    report = json.loads(run_pack("verify", dst, "--json").stdout)
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
    assert_one_line_error(run_pack("info", copy), 1, *words)


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
    assert run_pack("convert", src, dst, "--to", fmt, "--workers", "0", *args).exit_code == 0
    path = dst / name
    flip(path, path.stat().st_size - (8 if name == "labels.npy" else 300))
    verify_fails(dst, name)


def test_verify_against_a_changed_source(src: Path, packed_wds: Path, tmp_path: Path) -> None:
    changed = tmp_path / "src"
    shutil.copytree(src, changed)
    assert run_pack("verify", packed_wds, "--source", changed).exit_code == 0
    victim = sorted((changed / "class_01").iterdir())[2]
    victim.write_bytes(victim.read_bytes() + b"\0")
    assert_one_line_error(run_pack("verify", packed_wds, "--source", changed), 1, victim.name,
                          "bytes differ")
    victim.unlink()
    added = changed / "class_02" / "new.jpg"
    shutil.copy(sorted((changed / "class_00").iterdir())[0], added)
    assert_one_line_error(run_pack("verify", packed_wds, "--source", changed), 1, "new.jpg",
                          "not in")


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
