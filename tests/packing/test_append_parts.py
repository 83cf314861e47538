"""Appends to the one-file formats (lmdb, hdf5) add a part each: the old data files are
never rewritten (same inode, same bytes), every reader and `verify --source` see the
parts as one dataset, and `--replace` writes the dataset again as one file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from packer import append, formats, verify
from packer.core.index import open_dataset, read_index
from readers import PackedDataset
from tests.append_support import BASE, make_sources, pack, samples

PARTED = ("lmdb", "hdf5")
FIRST = {"lmdb": "data.lmdb/data.mdb", "hdf5": "data.h5"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the base folder, the base with half the new images, the union)."""
    root = tmp_path_factory.mktemp("append-parts")
    base, union = make_sources(root)
    half = root / "half"
    shutil.copytree(base, half)
    new = sorted(p for p in union.rglob("new_*"))
    for path in new[: len(new) // 2]:
        target = half / path.relative_to(union)
        target.parent.mkdir(exist_ok=True)
        shutil.copy(path, target)
    return base, half, union


def _grown(fmt: str, sources: tuple[Path, Path, Path], folder: Path, *steps: int) -> Path:
    """The base packed into `folder/ds.<fmt>`, then appended to with each source of
    `steps` (1: the half, 2: the union), in order."""
    dst = folder / f"ds.{fmt}"
    pack(sources[0], dst, fmt)
    for step in steps:
        append(sources[step], dst, workers=0)
    return dst


def _stamp(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return info.st_ino, info.st_mtime_ns, info.st_size


@pytest.mark.parametrize("fmt", PARTED)
def test_each_append_adds_a_part_and_leaves_the_old_files(
        fmt: str, sources: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, half, union = sources
    dst = tmp_path / f"ds.{fmt}"
    pack(base, dst, fmt)
    first = dst / FIRST[fmt]
    stamps = [_stamp(first)]
    append(half, dst, workers=0)
    stamps.append(_stamp(dst / read_index(dst).shards[1].name))
    append(union, dst, workers=0)
    index = read_index(dst)
    names = [shard.name for shard in index.shards]
    parts = {"lmdb": ["data.lmdb/data-00001.mdb", "data.lmdb/data-00002.mdb"],
             "hdf5": ["data.parts/data-00001.h5", "data.parts/data-00002.h5"]}[fmt]
    assert names == [FIRST[fmt], *parts]
    assert [_stamp(dst / name) for name in names[:2]] == stamps  # never rewritten
    assert sum(shard.num_samples for shard in index.shards) == index.num_samples
    union_ds = tmp_path / f"union.{fmt}"
    pack(union, union_ds, fmt)
    base_ds = tmp_path / f"base.{fmt}"
    pack(base, base_ds, fmt)
    got = samples(dst)
    assert got[:BASE] == samples(base_ds)
    assert sorted(got) == sorted(samples(union_ds))
    report = verify(dst, union)
    assert report.ok, report.problem
    stored = formats.load(fmt).read_labels(dst, index)
    _, table = open_dataset(dst)
    assert stored.tolist() == table.labels.tolist()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", PARTED)
def test_a_loader_reads_every_part_once(fmt: str, workers: int,
                                        sources: tuple[Path, Path, Path],
                                        tmp_path: Path) -> None:
    dst = _grown(fmt, sources, tmp_path, 1, 2)
    _, table = open_dataset(dst)
    dataset = PackedDataset(dst, with_keys=True, decode="raw")
    loader = DataLoader(dataset, batch_size=7, num_workers=workers,
                        collate_fn=lambda batch: batch)
    seen = [(key, bytes(data)) for batch in loader for data, _, key in batch]
    assert [key for key, _ in seen] == table.keys()
    for i, (_, data) in enumerate(seen):  # each sample's bytes from its own part
        assert data == bytes(dataset[i][0])


@pytest.mark.parametrize("fmt", PARTED)
def test_replace_writes_the_parts_again_as_one_file(
        fmt: str, sources: tuple[Path, Path, Path], tmp_path: Path) -> None:
    union = sources[2]
    dst = _grown(fmt, sources, tmp_path, 1)
    assert len(read_index(dst).shards) == 2
    changed = tmp_path / "changed"
    shutil.copytree(union, changed)
    old = sorted(p for p in changed.rglob("*.*") if not p.name.startswith("new_"))
    held_new = sorted(p for p in changed.rglob("new_*"))[0]  # a sample of the second part
    shutil.copy(old[3], old[0])
    shutil.copy(old[4], held_new)
    result = append(changed, dst, workers=0, replace=True)
    assert len(result.replaced) == 2
    index = read_index(dst)
    assert [shard.name for shard in index.shards] == [FIRST[fmt]]
    leftover = [p for p in dst.rglob("data-0000*") if p.is_file()]
    assert leftover == []  # the stale parts are gone
    report = verify(dst, changed)
    assert report.ok, report.problem
    append(union, dst, workers=0, replace=True)  # back: a part-free rewrite again
    assert verify(dst, union).ok
    more = tmp_path / "more"
    shutil.copytree(union, more)
    extra = next(iter(sorted(more.rglob("new_*"))))
    shutil.copy(extra, extra.with_name("newer_" + extra.name))
    assert append(more, dst, workers=0).num_new == 1
    assert len(read_index(dst).shards) == 2
    assert verify(dst, more).ok
    assert os.path.exists(dst / read_index(dst).shards[1].name)


@pytest.mark.parametrize("fmt", PARTED)
def test_an_append_of_rejects_only_adds_no_part(fmt: str, sources: tuple[Path, Path, Path],
                                                tmp_path: Path) -> None:
    base = sources[0]
    src = tmp_path / "src"
    shutil.copytree(base, src)
    next(iter(sorted(src.iterdir()))).joinpath("new_broken.jpg").write_bytes(b"\xff\xd8 not")
    dst = _grown(fmt, (base, base, base), tmp_path)
    result = append(src, dst, workers=0)
    assert result.num_new == 0 and result.num_new_rejects == 1
    assert [shard.name for shard in read_index(dst).shards] == [FIRST[fmt]]
    assert verify(dst).ok
