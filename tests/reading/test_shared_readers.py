"""One registry of opened datasets per process (packer.dataset.open), shared by `readers`'
datasets and by a conversion that reads a packed dataset (packer.source.packed).

py-lmdb refuses to open an environment twice in a process, so with two registries a
process that reads an lmdb dataset and converts from it failed ("already open").
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
from pathlib import Path

import pytest

from packer.core.record import SourceItem
from packer.dataset import open as dataset_open
from packer.errors import SourceError
from packer.source.packed import PackedSource
from readers import PackedDataset
from tests.helpers import pack_every_format, run_pack

NUM = 12


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("shared"), NUM, (16, 16), 24, 40)


def item(i: int) -> SourceItem:
    return SourceItem(i, f"k{i}", f"k{i}", 0)


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5", "npy"])
def test_a_dataset_and_a_source_share_one_reader(packed: dict[str, Path], fmt: str) -> None:
    ds = PackedDataset(packed[fmt], decode="raw")
    first = bytes(ds[0][0])
    source = PackedSource(packed[fmt])
    source.open()
    assert source._reader() is ds.handles().reader
    assert source.read(item(0)) == first


def test_converting_from_an_lmdb_dataset_being_read(packed: dict[str, Path],
                                                    tmp_path: Path) -> None:
    ds = PackedDataset(packed["lmdb"], decode="raw")
    before = [bytes(ds[i][0]) for i in range(NUM)]
    result = run_pack("convert", packed["lmdb"], tmp_path / "out.wds", "--to", "wds",
                      "--workers", "0")
    assert result.exit_code == 0, result.output
    assert [bytes(ds[i][0]) for i in range(NUM)] == before  # reopened after the source closed
    copy = PackedDataset(tmp_path / "out.wds", decode="raw")
    assert [bytes(copy[i][0]) for i in range(NUM)] == before


def _read_in_child(source: PackedSource, ds: PackedDataset, queue: multiprocessing.Queue[object]
                   ) -> None:
    data = source.read(item(1))
    queue.put((data == bytes(ds[1][0]), source._opened.pid == os.getpid(),
               source._reader() is ds.handles().reader))


def test_a_forked_child_opens_its_own_reader(packed: dict[str, Path]) -> None:
    """LMDB forbids using an environment after fork: the child closes the inherited one."""
    ds = PackedDataset(packed["lmdb"], decode="raw")
    source = PackedSource(packed["lmdb"])
    assert source.read(item(1)) == bytes(ds[1][0])
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_read_in_child, args=(source, ds, queue))
    child.start()
    outcome = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and outcome == (True, True, True)
    assert source.read(item(1)) == bytes(ds[1][0])  # the parent's handles are untouched


def test_a_dataset_reconverted_in_place_gets_a_new_entry(packed: dict[str, Path],
                                                         tmp_path: Path) -> None:
    folder = tmp_path / "copy.lmdb"
    shutil.copytree(packed["lmdb"], folder)
    source = PackedSource(folder)
    pickled = pickle.dumps(source)
    old = source._opened
    (folder / "index.json").write_bytes((folder / "index.json").read_bytes() + b"\n")
    renewed = dataset_open.opened(dataset_open.local_version(folder))
    assert renewed is not old and renewed.sha256 != old.sha256
    with pytest.raises(SourceError, match="changed during the conversion"):
        pickle.loads(pickled)
