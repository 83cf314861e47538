"""`pack dedup --near`: dHash groups of re-encoded and resized copies, and the band search
against brute force."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import packer
from packer.dataset.duplicates import exact_duplicates
from packer.dataset.near import near_duplicates, near_pairs
from packer.testing import make_sample_folder
from tests.helpers import assert_one_line_error, run_pack

ORIGINAL = "class_00/img_000002.jpg"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("near")
    src = make_sample_folder(root / "src", count=16, classes=2, min_side=64, max_side=120)
    image = Image.open(src / ORIGINAL).convert("RGB")
    image.save(src / "class_01/zz_requality.jpg", quality=40)  # re-encoded
    image.resize((image.width // 2, image.height // 2)).save(src / "class_00/zz_half.png")
    packer.convert(src, root / "data.wds", "wds", run=packer.ConvertOptions(workers=0))
    return root / "data.wds"


def test_copies_that_look_alike_form_one_group(dataset: Path) -> None:
    report = near_duplicates(dataset, distance=4, workers=2)
    assert [set(group.keys) for group in report.groups] == [
        {ORIGINAL[:-4], "class_01/zz_requality", "class_00/zz_half"}]
    assert not exact_duplicates(dataset).groups  # none of them exact


def test_cli_near_json_and_option_checks(dataset: Path) -> None:
    result = run_pack("dedup", dataset, "--near", "--distance", "6", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["kind"] == "near (dHash within 6 bits)" and facts["num_duplicates"] >= 2
    assert_one_line_error(run_pack("dedup", dataset, "--distance", "3"), 2, "--near")


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(0, 39), st.integers(0, 63)), max_size=60),
       st.integers(0, 6))
def test_band_search_finds_every_pair_brute_force_does(seeds: list[int],
                                                       flips: list[tuple[int, int]],
                                                       distance: int) -> None:
    values = [seeds[k % len(seeds)] for k in range(len(seeds) * 2)]  # near copies
    for k, bit in flips:
        values[k % len(values)] ^= 1 << bit
    hashes = np.array(values, np.uint64)
    want = {(i, j) for i in range(len(values)) for j in range(i + 1, len(values))
            if bin(values[i] ^ values[j]).count("1") <= distance}
    assert {tuple(pair) for pair in near_pairs(hashes, distance).tolist()} == want


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the dHashes computed from here on."""
    from packer.dataset import near

    calls: list[int] = []
    real = near.dhash

    def counted(gray: Image.Image) -> tuple[int, int]:
        calls.append(1)
        return real(gray)

    monkeypatch.setattr(near, "dhash", counted)
    return calls


def test_hashes_are_kept_and_computed_once(dataset: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.dataset.near import hashes_of

    folder = tmp_path / "copy.wds"
    shutil.copytree(dataset, folder)
    (folder / "near-hashes.npy").unlink(missing_ok=True)  # kept by an earlier report
    first = hashes_of(folder, workers=2)
    assert (folder / "near-hashes.npy").is_file()
    calls = _counting(monkeypatch)
    assert np.array_equal(hashes_of(folder, workers=2), first) and not calls
    for damaged in (b"damaged", b""):
        (folder / "near-hashes.npy").write_bytes(damaged)
        calls.clear()
        assert np.array_equal(hashes_of(folder, workers=2), first)
        assert len(calls) == len(first)  # a damaged file: every hash computed again
    assert packer.verify(folder).ok  # the kept hashes are not part of the data


def test_an_append_computes_only_the_new_samples(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.dataset.near import hashes_of

    src = make_sample_folder(tmp_path / "src", count=12, classes=2, min_side=48, max_side=80)
    dst = tmp_path / "data.lmdb"
    packer.convert(src, dst, "lmdb", run=packer.ConvertOptions(workers=0))
    hashes_of(dst, workers=1)
    extra = make_sample_folder(tmp_path / "extra", count=5, classes=2, seed=3, min_side=48,
                               max_side=80)
    for path in extra.rglob("*.*"):
        path.rename(src / path.parent.name / f"new_{path.name}")
    assert packer.append(src, dst, workers=0).num_new == 5
    calls = _counting(monkeypatch)
    grown = hashes_of(dst, workers=1)
    assert len(calls) == 5
    (dst / "near-hashes.npy").unlink()
    assert np.array_equal(hashes_of(dst, workers=1), grown)  # as computed from scratch


def test_a_folder_it_cannot_write_is_reported_all_the_same(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.dataset import near

    folder = tmp_path / "readonly.wds"
    shutil.copytree(dataset, folder)
    (folder / "near-hashes.npy").unlink(missing_ok=True)  # kept by an earlier report

    def refused(path: Path, data: bytes) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(near, "write_atomic", refused)
    report = near_duplicates(folder, distance=4, workers=1)
    assert len(report.groups) == 1 and not (folder / "near-hashes.npy").exists()
