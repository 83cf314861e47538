"""`packer.append` on every format: the grown dataset is the union's samples (old first,
then the new ones in key order), old samples keep their bytes and digests, new classes
take the next labels, a rerun is a no-op, and readers and `verify --source` see it whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from packer import append, verify
from packer.core.index import open_dataset, read_index
from packer.source.packed import read_rejects
from readers import PackedDataset
from tests.append_support import BASE, make_sources, pack, rows, samples
from tests.helpers import FORMATS, tree_hashes


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_sources(tmp_path_factory.mktemp("append-src"))


@pytest.fixture(params=FORMATS)
def grown(request: pytest.FixtureRequest, sources: tuple[Path, Path], tmp_path: Path
          ) -> tuple[str, Path, Path]:
    """(format, a dataset of the base grown by the union, a copy of the base dataset)."""
    fmt: str = request.param
    base, union = sources
    dst = tmp_path / f"ds.{fmt}"
    pack(base, dst, fmt)
    shutil.copytree(dst, tmp_path / "before")
    append(union, dst, workers=0)
    return fmt, dst, tmp_path / "before"


def test_append_equals_the_union_in_documented_order(grown: tuple[str, Path, Path],
                                                     sources: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    fmt, dst, before = grown
    whole = pack(sources[1], tmp_path / f"union.{fmt}", fmt)
    union = samples(tmp_path / f"union.{fmt}")
    got = samples(dst)
    old = samples(before)
    assert got[:BASE] == old
    assert got[BASE:] == sorted(s for s in union if s not in old)
    assert sorted(got) == sorted(union)
    index = read_index(dst)
    assert index.class_names == ("class_00", "class_01", "class_02", "a_first", "class_03")
    assert sorted(index.class_names) == sorted(whole.class_names)
    assert verify(dst, sources[1]).ok, verify(dst, sources[1]).problem
    assert verify(dst).ok


def test_old_part_keeps_rows_bytes_and_digests(grown: tuple[str, Path, Path]) -> None:
    fmt, dst, before = grown
    _, old = open_dataset(before)
    _, new = open_dataset(dst)
    assert np.array_equal(new.rows[:BASE], old.rows)
    assert bytes(new.keys_blob[: len(old.keys_blob)]) == bytes(old.keys_blob)
    if fmt == "wds":  # the old shards are the same files
        kept = {name: digest for name, digest in tree_hashes(before).items()
                if name.endswith(".tar")}
        assert kept and all(tree_hashes(dst)[name] == d for name, d in kept.items())


def test_readers_read_every_sample(grown: tuple[str, Path, Path]) -> None:
    _, dst, _ = grown
    index, table = open_dataset(dst)
    dataset = PackedDataset(dst)
    assert len(dataset) == index.num_samples
    labels = [int(dataset[i][1]) for i in range(len(dataset))]
    assert labels == table.labels.tolist()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_reads_the_grown_dataset_once(grown: tuple[str, Path, Path],
                                               workers: int) -> None:
    _, dst, _ = grown
    _, table = open_dataset(dst)
    dataset = PackedDataset(dst, with_keys=True, size=(16, 16))
    loader = DataLoader(dataset, batch_size=8, num_workers=workers)
    seen = [(key, int(label)) for _, labels, keys in loader
            for key, label in zip(keys, labels, strict=True)]
    assert seen == list(zip(table.keys(), table.labels.tolist(), strict=True))


def test_rerun_is_a_no_op(grown: tuple[str, Path, Path], sources: tuple[Path, Path]) -> None:
    _, dst, _ = grown
    files = tree_hashes(dst)
    result = append(sources[1], dst, workers=0)
    assert result.num_new == 0 and result.summary.startswith("0 new samples")
    assert tree_hashes(dst) == files
    assert append(sources[1], dst, workers=0, resume=True).num_new == 0


def test_new_classes_are_named_with_their_labels(sources: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    dst = tmp_path / "ds.wds"
    pack(sources[0], dst, "wds")
    result = append(sources[1], dst, workers=0)
    assert result.summary == ("20 new samples (44 in all); new classes: a_first, class_03 "
                              "(labels 3, 4)")


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5"])
def test_a_key_held_with_other_bytes_is_a_reject(fmt: str, sources: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources[0], src)
    dst = tmp_path / f"ds.{fmt}"
    pack(src, dst, fmt)
    _, before = open_dataset(dst)
    changed = sorted(src.rglob("*.jpg"))[0]
    shutil.copy(sorted(src.rglob("*.jpg"))[1], changed)
    result = append(src, dst, workers=0)
    assert result.num_new == 0 and result.num_new_rejects == 1
    key = changed.relative_to(src).with_suffix("").as_posix()
    (reject,) = [r for r in read_rejects(dst) if r.path == str(changed)]
    assert repr(key) in reject.reason and "other bytes" in reject.reason
    _, after = open_dataset(dst)
    assert rows(after) == rows(before)
    assert append(src, dst, workers=0).num_new_rejects == 0  # listed once, not again


def test_a_same_size_change_needs_the_digest_check(sources: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources[0], src)
    dst = tmp_path / "ds.wds"
    pack(src, dst, "wds")
    changed = sorted(src.rglob("*.jpg"))[0]
    data = bytearray(changed.read_bytes())
    data[-3] ^= 0xFF  # the same size, other bytes
    changed.write_bytes(bytes(data))
    assert append(src, dst, workers=0).num_new_rejects == 0
    result = append(src, dst, workers=0, existing="digest")
    assert result.num_new_rejects == 1
    assert "other bytes" in read_rejects(dst)[0].reason


def test_conflicting_options_are_refused(sources: tuple[Path, Path], tmp_path: Path) -> None:
    dst = tmp_path / "ds.npy"
    pack(sources[0], dst, "npy")
    with pytest.raises(ValueError, match=r"--size 32x32 conflicts with DST's 24x24"):
        append(sources[1], dst, {"size": (32, 32)})
    assert append(sources[1], dst, {"size": (24, 24)}, workers=0).num_new == 20


def test_bad_new_inputs_go_to_rejects(sources: tuple[Path, Path], tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources[0], src)
    dst = tmp_path / "ds.lmdb"
    pack(src, dst, "lmdb")
    (src / "class_00" / "broken.jpg").write_bytes(b"not an image")
    result = append(src, dst, workers=0)
    assert result.num_new == 0 and result.num_new_rejects == 1
    assert [r.path for r in read_rejects(dst)] == [str(src / "class_00" / "broken.jpg")]
    assert read_index(dst).num_rejected == 1
    assert verify(dst, src).ok


def test_append_from_an_archive_and_a_packed_dataset(sources: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    """Both read their new items by scan position: each sample gets its own bytes."""
    archive = Path(shutil.make_archive(str(tmp_path / "union"), "tar", sources[1]))
    dst = tmp_path / "ds.wds"
    pack(sources[0], dst, "wds")
    assert append(archive, dst, workers=0).num_new == 20
    report = verify(dst, archive)  # member bytes against the stored digests
    assert report.ok, report.problem
    packed = tmp_path / "union.lmdb"
    pack(sources[1], packed, "lmdb")
    grown = tmp_path / "ds.h5"
    pack(sources[0], grown, "hdf5")
    assert append(packed, grown, workers=0).num_new == 20
    report = verify(grown, packed)
    assert report.ok, report.problem
    assert samples(grown)[24:] == [s for s in samples(packed) if s not in samples(grown)[:24]]


@pytest.mark.parametrize("stratify", [False, True])
def test_splits_stay_put_across_a_real_append(sources: tuple[Path, Path], tmp_path: Path,
                                              stratify: bool) -> None:
    """split, append, split again with the same settings: no old sample changes split,
    and until the rerun the readers refuse the splits made for the smaller dataset."""
    from packer import split
    from packer.errors import IncompleteDatasetError

    dst = tmp_path / "ds.lmdb"
    pack(sources[0], dst, "lmdb")
    split(dst, 0.25, 0.25, stratify=stratify, seed=5)
    _, table = open_dataset(dst)
    before = {name: {table.key(int(i)) for i in _indices(dst, name)}
              for name in ("train", "val", "test")}
    result = append(sources[1], dst, workers=0)
    assert result.splits_stale
    with pytest.raises(IncompleteDatasetError, match="rerun `pack split"):
        PackedDataset(dst, split="val")
    split(dst, 0.25, 0.25, stratify=stratify, seed=5)
    _, table = open_dataset(dst)
    after = {name: {table.key(int(i)) for i in _indices(dst, name)}
             for name in ("train", "val", "test")}
    for name, keys in before.items():
        assert keys <= after[name], name
    assert sum(map(len, after.values())) == len(table)


def _indices(dst: Path, name: str) -> list[int]:
    subset = PackedDataset(dst, split=name).subset
    assert subset is not None
    return subset.indices.tolist()
