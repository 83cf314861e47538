"""`pack verify` lists every damaged sample by key; `--repair --source` rewrites the
damaged wds shards from the source, byte-identical to a fresh conversion."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from packer import formats
from packer.core.index import INDEX_NAME, open_dataset
from packer.dataset import repair, verify
from packer.storage.files import commit
from tests.helpers import (
    FORMATS,
    assert_one_line_error,
    pack_with_fields,
    run_pack,
    shard_path,
    tree_hashes,
)

DATA = {"wds": None, "lmdb": "data.lmdb/data.mdb", "hdf5": "data.h5", "npy": "images.npy"}


def pack(src: Path, dst: Path, fmt: str) -> Path:
    args = {"npy": ["--size", "16x16"], "wds": ["--shard-samples", "6"]}.get(fmt, [])
    result = run_pack("convert", src, dst, "--to", fmt, "--workers", "0", *args)
    assert result.exit_code == 0, result.output
    return dst


@pytest.fixture(scope="module")
def packed(src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("repair")
    return {fmt: pack(src, root / fmt / "out", fmt) for fmt in FORMATS}


def copy_of(packed: dict[str, Path], fmt: str, tmp_path: Path) -> Path:
    dst = tmp_path / "damaged" / "out"  # the same name: wds shards carry it
    shutil.copytree(packed[fmt], dst)
    return dst


def flip_sample(folder: Path, sample: int) -> Path:
    """Flip a byte in the middle of `sample`'s stored bytes; returns the file."""
    index, table = open_dataset(folder)
    reader = formats.load(index.format).open_reader(folder, index, table)
    data = reader.read(sample)
    reader.close()
    name = DATA[index.format] or index.shards[index.shard_of(sample)].name
    path = folder / name
    content = bytearray(path.read_bytes())
    at = content.find(data) + len(data) // 2
    assert content.find(data) >= 0
    content[at] ^= 0xFF
    path.write_bytes(bytes(content))
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_lists_the_damaged_sample_by_key(packed: dict[str, Path], tmp_path: Path,
                                               fmt: str) -> None:
    dst = copy_of(packed, fmt, tmp_path)
    _, table = open_dataset(dst)
    path = flip_sample(dst, 7)
    result = run_pack("verify", dst)
    assert_one_line_error(result, 1, path.name, "1 damaged sample", table.key(7))
    offset = int(table.offsets[7])  # -1 where the format keeps no offset (lmdb)
    at = f" at byte {offset}" if offset >= 0 else ""
    assert result.stdout.splitlines() == [
        f"  sample 7 {table.key(7)!r}: {path.relative_to(dst)}{at}: digest mismatch"]
    report = json.loads(run_pack("verify", dst, "--json").stdout)
    assert report["ok"] is False
    assert [(d["index"], d["key"], d["reason"]) for d in report["damaged"]] == \
        [(7, table.key(7), "digest mismatch")]
    assert list(report["damaged_files"]) == [str(path.relative_to(dst))]


def test_verify_caps_the_listing_and_json_gives_all(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "one.wds"
    assert run_pack("convert", src, dst, "--to", "wds", "--shard-samples", "24",
                    "--workers", "0").exit_code == 0
    shard_path(dst, 0).unlink()
    result = run_pack("verify", dst)
    assert_one_line_error(result, 1, "missing", "24 damaged samples")
    lines = result.stdout.splitlines()
    assert len(lines) == 21 and lines[-1] == "  ... and 4 more (--json lists them all)"
    assert all(line.endswith(": missing") for line in lines[:20])
    report = json.loads(run_pack("verify", dst, "--json").stdout)
    assert [d["index"] for d in report["damaged"]] == list(range(24))


@pytest.mark.parametrize("fmt", FORMATS)
def test_repair_restores_a_fresh_conversion_byte_for_byte(
        src: Path, packed: dict[str, Path], tmp_path: Path, fmt: str) -> None:
    dst = copy_of(packed, fmt, tmp_path)
    before = tree_hashes(dst)
    first, second = flip_sample(dst, 7), flip_sample(dst, 20)
    assert tree_hashes(dst) != before
    result = run_pack("verify", dst, "--repair", "--source", src)
    assert result.exit_code == 0, result.output
    names = sorted({str(first.relative_to(dst)), str(second.relative_to(dst))})
    assert result.stdout.splitlines()[0] == f"repaired: {', '.join(names)}"
    assert tree_hashes(dst) == before
    fresh = pack(src, tmp_path / "fresh" / "out", fmt)
    assert tree_hashes(dst) == tree_hashes(fresh)  # index.json included
    assert run_pack("verify", dst).exit_code == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_fields_are_listed_and_repaired(tmp_path: Path, fmt: str) -> None:
    dst, _ = pack_with_fields(tmp_path, fmt)
    before = tree_hashes(dst)
    caption = "naïve 日本語 €".encode()  # sample 2's caption (and 7's, later)
    path = next(p for p in sorted(dst.rglob("*")) if p.is_file()
                and p.name not in (INDEX_NAME, "samples.npy", "keys.npy")
                and caption in p.read_bytes())
    content = bytearray(path.read_bytes())
    content[content.find(caption) + 2] ^= 0x01
    path.write_bytes(bytes(content))
    _, table = open_dataset(dst)
    report = json.loads(run_pack("verify", dst, "--json").stdout)
    assert [(d["index"], d["key"], d["reason"]) for d in report["damaged"]] == \
        [(2, table.key(2), "fields digest mismatch")]
    assert str(path.relative_to(dst)) in report["damaged"][0]["file"].split(", ")
    result = run_pack("verify", dst, "--repair", "--source", tmp_path / "src" / "manifest.jsonl")
    assert result.exit_code == 0, result.output
    assert tree_hashes(dst) == before


def test_repair_rewrites_damaged_npy_labels(src: Path, packed: dict[str, Path],
                                            tmp_path: Path) -> None:
    dst = copy_of(packed, "npy", tmp_path)
    before = tree_hashes(dst)
    labels = dst / "labels.npy"
    content = bytearray(labels.read_bytes())
    content[-8 * 3] ^= 0x01  # the label of the third sample from the end
    labels.write_bytes(bytes(content))
    report = json.loads(run_pack("verify", dst, "--json").stdout)
    assert [(d["index"], d["file"]) for d in report["damaged"]] == [(21, "labels.npy")]
    result = run_pack("verify", dst, "--repair", "--source", src)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("repaired: labels.npy\n")
    assert tree_hashes(dst) == before


def test_a_kill_between_renames_leaves_each_shard_old_or_new(
        src: Path, packed: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dst = copy_of(packed, "wds", tmp_path)
    original = tree_hashes(dst)
    flip_sample(dst, 7)
    flip_sample(dst, 20)
    damaged = tree_hashes(dst)
    renames: list[Path] = []

    def killed_after_one(tmp: Path, path: Path) -> None:
        if renames:
            raise KeyboardInterrupt
        renames.append(path)
        commit(tmp, path)

    monkeypatch.setattr(repair, "commit", killed_after_one)
    assert run_pack("verify", dst, "--repair", "--source", src).exit_code == 130
    monkeypatch.undo()
    now = tree_hashes(dst)
    for name in original:
        if not name.endswith(".partial"):
            assert now[name] in (original[name], damaged[name]), name
    assert now[renames[0].name] == original[renames[0].name]
    assert run_pack("verify", dst, "--repair", "--source", src).exit_code == 0
    assert tree_hashes(dst) == original


def test_repair_refuses_a_changed_source_naming_the_key(
        src: Path, packed: dict[str, Path], tmp_path: Path) -> None:
    dst = copy_of(packed, "wds", tmp_path)
    _, table = open_dataset(dst)
    flip_sample(dst, 7)
    damaged = tree_hashes(dst)
    changed = tmp_path / "src"
    shutil.copytree(src, changed)
    image = next(changed.glob(f"{table.key(7)}.*"))
    image.write_bytes(next(p for p in changed.rglob("*.jpg") if p != image).read_bytes())
    result = run_pack("verify", dst, "--repair", "--source", changed)
    assert_one_line_error(result, 1, repr(table.key(7)), "differs", "reconvert")
    assert tree_hashes(dst) == damaged  # nothing written, no partial file left
    image.unlink()
    assert_one_line_error(run_pack("verify", dst, "--repair", "--source", changed), 1,
                          repr(table.key(7)), "no item")
    assert tree_hashes(dst) == damaged


def test_repair_needs_a_source(packed: dict[str, Path], tmp_path: Path) -> None:
    dst = copy_of(packed, "wds", tmp_path)
    assert_one_line_error(run_pack("verify", dst, "--repair"), 2, "--source")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_flip_anywhere_is_found_and_repaired(src: Path, packed: dict[str, Path],
                                               tmp_path: Path, fmt: str, seed: int) -> None:
    # Anywhere in a data file: tar headers and padding, LMDB pages, the HDF5 metadata,
    # the npy header.
    dst = copy_of(packed, fmt, tmp_path)
    before = tree_hashes(dst)
    rng = random.Random(seed)
    index, _ = open_dataset(dst)
    path = dst / rng.choice(index.shards).name
    content = bytearray(path.read_bytes())
    content[rng.randrange(len(content))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(content))
    assert_one_line_error(run_pack("verify", dst), 1, path.name)
    result = run_pack("verify", dst, "--repair", "--source", src)
    assert result.exit_code == 0, result.output
    assert tree_hashes(dst) == before


def test_a_reader_that_crashes_on_a_damaged_file_is_reported(
        packed: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dst = copy_of(packed, "lmdb", tmp_path)
    path = flip_sample(dst, 3)
    monkeypatch.setattr(verify, "CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert_one_line_error(run_pack("verify", dst), 1, path.name, "crashed the reader")
