"""images.npy's checksum is the sha256 of its pieces (header, conversion rows, each
append's rows): an append keeps the old pieces and hashes only its own rows, and
`verify` names the byte range that differs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from packer import append, verify
from packer.core.index import INDEX_NAME, read_index
from packer.errors import CorruptDatasetError
from packer.formats import _npy
from packer.storage.files import pieces_digest
from tests.append_support import BASE, make_sources, pack

ROW = 24 * 24 * 3  # append_support packs npy at 24x24


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_sources(tmp_path_factory.mktemp("npy-pieces"))


def _sha(path: Path, start: int, size: int) -> str:
    with open(path, "rb") as handle:
        handle.seek(start)
        return hashlib.sha256(handle.read(size)).hexdigest()


def test_a_conversion_lists_its_header_and_rows(sources: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    dst = tmp_path / "ds.npy"
    pack(sources[0], dst, "npy")
    shard = read_index(dst).shards[0]
    path = dst / _npy.IMAGES
    assert shard.pieces == ((128, _sha(path, 0, 128)), (BASE * ROW, _sha(path, 128, BASE * ROW)))
    assert shard.sha256 == pieces_digest(shard.pieces)
    assert shard.num_bytes == path.stat().st_size
    assert np.load(path, mmap_mode="r").shape == (BASE, 24, 24, 3)


def test_an_append_keeps_the_old_pieces_and_adds_its_rows(sources: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    base, union = sources
    dst = tmp_path / "ds.npy"
    pack(base, dst, "npy")
    before = read_index(dst).shards[0]
    result = append(union, dst, workers=0)
    shard = read_index(dst).shards[0]
    path = dst / _npy.IMAGES
    assert shard.pieces[1] == before.pieces[1]  # the old rows: not hashed again
    new_rows = result.num_new * ROW
    assert shard.pieces[2] == (new_rows, _sha(path, 128 + BASE * ROW, new_rows))
    assert shard.pieces[0] == (128, _sha(path, 0, 128))
    assert verify(dst, union).ok


def test_an_index_without_pieces_still_appends_and_verifies(sources: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    """A dataset indexed with one whole-file sha256 (as packed before pieces)."""
    base, union = sources
    dst = tmp_path / "ds.npy"
    pack(base, dst, "npy")
    data = json.loads((dst / INDEX_NAME).read_text())
    entry = data["shards"][0]
    del entry["pieces"]
    data["format_version"] = 1  # as such an index was written
    entry["sha256"] = hashlib.sha256((dst / _npy.IMAGES).read_bytes()).hexdigest()
    (dst / INDEX_NAME).write_text(json.dumps(data))
    assert verify(dst).ok
    append(union, dst, workers=0)
    assert len(read_index(dst).shards[0].pieces) == 3
    report = verify(dst, union)
    assert report.ok, report.problem


@pytest.mark.parametrize(("at", "named"), [(5, "bytes 0-127"), (128 + ROW + 7, "bytes 128-")])
def test_verify_names_the_damaged_piece(sources: tuple[Path, Path], tmp_path: Path,
                                        at: int, named: str) -> None:
    dst = tmp_path / "ds.npy"
    pack(sources[0], dst, "npy")
    with open(dst / _npy.IMAGES, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0xFF]))
    report = verify(dst)
    assert not report.ok and named in str(report.problem), report.problem


def test_pieces_that_do_not_add_up_are_a_damaged_index(sources: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    dst = tmp_path / "ds.npy"
    pack(sources[0], dst, "npy")
    data = json.loads((dst / INDEX_NAME).read_text())
    data["shards"][0]["pieces"][1][0] += 1
    (dst / INDEX_NAME).write_text(json.dumps(data))
    with pytest.raises(CorruptDatasetError, match="pieces must be"):
        read_index(dst)


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5"])
def test_other_formats_index_one_sha256_as_before(fmt: str, sources: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    dst = tmp_path / f"ds.{fmt}"
    pack(sources[0], dst, fmt)
    entries = json.loads((dst / INDEX_NAME).read_text())["shards"]
    assert entries and all(sorted(e) == ["name", "num_bytes", "num_samples", "sha256"]
                           for e in entries)
    shutil.rmtree(dst)
