"""`packer.append(..., replace=True)`: a key DST holds with other bytes takes the new
bytes at its index; every other sample keeps its bytes and digest, readers and
`verify --source` see the new bytes, the summary names the samples, and an
interruption at any rename or fsync leaves the old dataset or resumes to the same files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from packer import append, verify
from packer.conversion.append import AppendInterrupted
from packer.core.checks import digest_of
from packer.core.index import INDEX_NAME, open_dataset, read_index
from packer.errors import PackError
from readers import PackedDataset
from tests.append_support import ADDED, BASE, make_sources, pack
from tests.helpers import tree_hashes

ORIGINALS = ["wds", "lmdb", "hdf5"]  # formats that store the files, whose bytes compare


class Injected(Exception):
    """The failure a test raises inside an append."""


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """(the base folder, the union with two held images changed, their keys)."""
    root = tmp_path_factory.mktemp("append-replace")
    base, union = make_sources(root)
    images = sorted(p for p in union.rglob("*.*") if not p.name.startswith("new_"))
    changed = [images[1], images[17]]  # in two different shards of 8
    for path, other in zip(changed, [images[5], images[9]], strict=True):
        shutil.copy(other, path)
    return base, union, [p.relative_to(union).with_suffix("").as_posix() for p in changed]


@pytest.mark.parametrize("fmt", ORIGINALS)
def test_replace_puts_the_new_bytes_at_the_old_index(fmt: str, sources: tuple[Path, Path,
                                                                              list[str]],
                                                     tmp_path: Path) -> None:
    base, union, keys = sources
    dst = tmp_path / f"ds.{fmt}"
    pack(base, dst, fmt)
    _, before = open_dataset(dst)
    shards = tree_hashes(dst)
    refused = append(union, dst, workers=0)
    assert refused.num_new == ADDED and refused.num_new_rejects == 2 and not refused.replaced
    result = append(union, dst, workers=0, replace=True)
    assert result.replaced == tuple(sorted(keys)) and result.num_new == 0
    assert f"replaced 2 samples in place: {', '.join(sorted(keys))}" in result.summary
    index, after = open_dataset(dst)
    held = [before.key(i) for i in range(BASE)]
    assert after.keys()[:BASE] == held  # every old sample keeps its index
    for i, key in enumerate(held):
        if key in keys:
            data = (union / key).with_suffix(".jpg")
            path = data if data.exists() else data.with_suffix(".png")
            assert after.digest(i) == digest_of(path.read_bytes())
        else:
            assert after.digest(i) == before.digest(i), key
    assert index.num_rejected == 0  # the conflicts listed before are replaced now
    report = verify(dst, union)
    assert report.ok, report.problem
    dataset = PackedDataset(dst)
    assert [int(dataset[i][1]) for i in range(len(dataset))] == after.labels.tolist()
    if fmt == "wds":  # the shard without a changed sample is the same file
        now = tree_hashes(dst)
        untouched = [n for n in shards if n.endswith("00001.tar")]
        assert untouched and all(now[n] == shards[n] for n in untouched)
    assert append(union, dst, workers=0, replace=True).replaced == ()  # a no-op now
    assert read_index(dst).extra["appended"][-1]["replaced"] == sorted(keys)


def test_npy_replaces_a_row_in_a_copy(sources: tuple[Path, Path, list[str]],
                                      tmp_path: Path) -> None:
    """npy re-encodes, so bytes are not compared: a changed class (a manifest) is."""
    base, _, _ = sources
    images = sorted(p for p in base.rglob("*.*"))
    lines = ["path,label"] + [f"{p.relative_to(base.parent)},{p.parent.name}" for p in images]
    (base.parent / "list.csv").write_text("\n".join(lines) + "\n")
    pack(base.parent / "list.csv", tmp_path / "from-csv.npy", "npy")
    moved = lines[3].split(",")[0]
    lines[3] = f"{moved},class_02"
    (base.parent / "list.csv").write_text("\n".join(lines) + "\n")
    _, before = open_dataset(tmp_path / "from-csv.npy")
    i = before.keys().index(moved.rsplit(".", 1)[0])
    handle = open(tmp_path / "from-csv.npy" / "images.npy", "rb")  # a reader's open file
    old = handle.read()
    result = append(base.parent / "list.csv", tmp_path / "from-csv.npy", workers=0,
                    replace=True)
    assert result.replaced == (moved.rsplit(".", 1)[0],)
    _, after = open_dataset(tmp_path / "from-csv.npy")
    assert int(after.labels[i]) == 2 and int(before.labels[i]) != 2
    handle.seek(0)
    assert handle.read() == old  # the file it had open is the old one, whole
    handle.close()
    assert verify(tmp_path / "from-csv.npy", base.parent / "list.csv").ok
    assert np.array_equal(np.delete(after.labels, i), np.delete(before.labels, i))
    assert np.array_equal(np.delete(after.digests, i, 0), np.delete(before.digests, i, 0))


@pytest.mark.parametrize("call", ["replace", "fsync"])
@pytest.mark.parametrize("fmt", ORIGINALS)
def test_replace_interrupted_at_every_rename_and_fsync(
        fmt: str, call: str, sources: tuple[Path, Path, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    base, union, _ = sources
    start = tmp_path / "base" / f"ds.{fmt}"
    pack(base, start, fmt)
    grown = _copy(start, tmp_path / "grown")
    append(union, grown, workers=0, replace=True)
    real = getattr(os, call)
    calls = [0]

    def failing(*args: object) -> object:
        if calls[0] == moment:
            raise Injected(f"os.{call} number {moment}")
        calls[0] += 1
        return real(*args)

    moment = -1
    for moment in range(0, 200, 3):
        dst = _copy(start, tmp_path / f"at{moment}")
        calls[0] = 0
        monkeypatch.setattr(os, call, failing)
        try:
            append(union, dst, workers=0, replace=True)
            finished = True
        except (Injected, PackError):
            finished = False
        monkeypatch.setattr(os, call, real)
        if finished:
            break
        if (dst / ".pack-append").exists():
            with pytest.raises(AppendInterrupted):
                append(union, dst, workers=0, replace=True)
            append(union, dst, workers=0, replace=True, resume=True)
        elif (dst / INDEX_NAME).read_bytes() != (grown / INDEX_NAME).read_bytes():
            assert verify(dst, None).ok  # stopped before it wrote anything
        append(union, dst, workers=0, replace=True)  # done: a no-op; else the whole append
        assert tree_hashes(dst) == tree_hashes(grown), moment
    assert moment > 3


def _copy(dataset: Path, parent: Path) -> Path:
    out = parent / dataset.name
    shutil.copytree(dataset, out)
    return out


def test_a_bad_replacement_is_a_reject_and_the_old_sample_stays(
        sources: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    from packer.source.packed import read_rejects

    base, _, _ = sources
    src = tmp_path / "src"
    shutil.copytree(base, src)
    dst = tmp_path / "ds.lmdb"
    pack(src, dst, "lmdb")
    _, before = open_dataset(dst)
    broken = sorted(src.rglob("*.jpg"))[0]
    broken.write_bytes(b"not an image")
    assert "other bytes" in read_rejects(dst)[0].reason if append(src, dst, workers=0) \
        .num_new_rejects else False
    result = append(src, dst, workers=0, replace=True)
    assert result.replaced == ()
    (reject,) = read_rejects(dst)
    assert reject.path == str(broken) and "other bytes" not in reject.reason
    _, after = open_dataset(dst)
    assert np.array_equal(after.digests, before.digests)
    assert verify(dst).ok
