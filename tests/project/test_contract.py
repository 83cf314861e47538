"""The conformance suite: one FormatContract class, one small subclass per format.

Every format must round-trip keys, labels and bytes; be readable by its stock tool
without our code; give identical files for any number of workers; resume to the same
bytes as an uninterrupted run; survive SIGKILL at any moment as either a complete
dataset or one that is refused until resumed; and refuse to clobber a complete DST.
The readers' wrappers (the chunk cache, a URL mirror's reader) read every format alike.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import h5py
import lmdb
import numpy as np
import pytest
import webdataset
from PIL import Image

from packer import ConvertOptions, convert
from packer.api import verify
from packer.core.index import open_dataset
from packer.formats import _lmdb_writer
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from tests.format_contract import FormatContract, Sample, expected_samples

# ---------------------------------------------------------------- one subclass per format


class TestWds(FormatContract):
    fmt = "wds"
    shards = ShardOptions(max_samples=6)
    cli_args = ("--shard-samples", "6")
    keeps_parts = True

    def stock_read(self, dst: Path) -> list[Sample]:
        urls = sorted(str(path) for path in dst.glob("*.tar"))  # what the README shows
        out = []
        for sample in webdataset.WebDataset(urls, shardshuffle=False, empty_check=False):
            exts = [k for k in sample if not k.startswith("__") and k != "cls"]
            assert len(exts) == 1, sorted(sample)
            out.append(Sample(unquote(sample["__key__"]), int(sample["cls"]), exts[0],
                              sample[exts[0]]))
        return out

    def test_webdataset_decode_pil(self, source: Path, tmp_path: Path) -> None:
        dst = tmp_path / "out"
        convert(source, dst, self.fmt, run=self.run())
        items = {item.key: item for item in scan(source).items}
        urls = sorted(str(path) for path in dst.glob("*.tar"))
        assert len(urls) > 1, "expected several shards"
        seen = []
        for sample in webdataset_pil(urls):
            key = unquote(sample["__key__"])
            item = items[key]
            ext = next(k for k in sample if not k.startswith("__") and k != "cls")
            image = sample[ext]
            assert isinstance(image, Image.Image)
            with Image.open(item.path) as original:
                want = np.asarray(original.convert("RGB"))
            assert np.array_equal(np.asarray(image.convert("RGB")), want), key
            assert sample["cls"] == item.label
            seen.append(key)
        assert seen == sorted(items)


def webdataset_pil(urls: list[str]) -> Any:
    return webdataset.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil")


class TestLmdb(FormatContract):
    fmt = "lmdb"

    def stock_read(self, dst: Path) -> list[Sample]:
        env = lmdb.open(str(dst / "data.lmdb"), readonly=True, lock=False, subdir=True)
        out = []
        try:
            with env.begin() as txn:
                for key, value in txn.cursor():
                    label, ext = struct.unpack_from("<q8s", value)
                    out.append(Sample(bytes(key).decode("utf-8"), label,
                                      ext.rstrip(b"\0").decode(), bytes(value[16:])))
        finally:
            env.close()
        return out

    def test_mdb_dump_reads_every_key(self, src: Path, tmp_path: Path) -> None:
        tool = shutil.which("mdb_dump")
        if tool is None:
            pytest.skip("mdb_dump (Debian lmdb-utils) is not installed")
        dst = tmp_path / "out"
        index = convert(src, dst, self.fmt, run=self.run())
        result = subprocess.run([tool, "-p", str(dst / "data.lmdb")], capture_output=True,
                                check=True, text=True)
        body = result.stdout.split("HEADER=END\n", 1)[1].splitlines()
        records = [line for line in body if line.startswith(" ")]
        assert len(records) == 2 * index.num_samples  # a key line and a value line each


    def test_map_grows_when_full(self, src: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_lmdb_writer, "INITIAL_MAP", 64 << 10)  # far too small: must grow
        monkeypatch.setattr(_lmdb_writer, "TXN_BYTES", 32 << 10)  # several transactions
        dst = tmp_path / "out"
        convert(src, dst, self.fmt, run=self.run())
        got = self.stock_read(dst)
        assert [(s.key, s.label, s.data) for s in got] == \
            [(s.key, s.label, s.data) for s in expected_samples(src, self.fmt)]
        assert verify(dst, src).ok


class TestHdf5(FormatContract):
    fmt = "hdf5"

    def stock_read(self, dst: Path) -> list[Sample]:
        with h5py.File(dst / "data.h5", "r") as h5:
            blob = h5["images"][:]
            offsets = h5["offsets"][:]
            labels = h5["labels"][:]
            keys = h5["keys"].asstr()[:]
            exts = h5["exts"].asstr()[:]
        return [Sample(str(keys[i]), int(labels[i]), str(exts[i]),
                       blob[offsets[i] : offsets[i + 1]].tobytes()) for i in range(len(labels))]

    def test_h5dump_reads_the_file(self, src: Path, tmp_path: Path) -> None:
        tool = shutil.which("h5dump")
        if tool is None:
            pytest.skip("h5dump (Debian hdf5-tools) is not installed")
        dst = tmp_path / "out"
        index = convert(src, dst, self.fmt, run=self.run())
        header = subprocess.run([tool, "-H", str(dst / "data.h5")], capture_output=True,
                                check=True, text=True).stdout
        for name in ("images", "offsets", "labels", "keys", "exts"):
            assert f'DATASET "{name}"' in header
        assert f"( {index.num_samples} )" in header
        labels = subprocess.run([tool, "-d", "/labels", "-y", "-w", "0", str(dst / "data.h5")],
                                capture_output=True, check=True, text=True).stdout
        data = labels.split("DATA {", 1)[1].split("}", 1)[0]
        values = [int(v) for v in data.replace(",", " ").split()]
        assert values == expected_labels(src)


def expected_labels(src: Path) -> list[int]:
    return [item.label for item in scan(src).items]


class TestNpy(FormatContract):
    fmt = "npy"
    passthrough = False
    keeps_parts = True

    def stock_read(self, dst: Path) -> list[Sample]:
        images = np.load(dst / "images.npy", mmap_mode="r")
        labels = np.load(dst / "labels.npy", mmap_mode="r")
        assert images.dtype == np.uint8 and images.ndim == 4 and images.shape[3] == 3
        assert labels.dtype == np.int64 and labels.shape == images.shape[:1]
        return [Sample(None, int(labels[i]), None, images[i].tobytes())
                for i in range(len(labels))]

    def test_default_size_is_256(self, src: Path, tmp_path: Path) -> None:
        index = convert(src, tmp_path / "out", self.fmt, run=self.run())
        assert index.image_size == (256, 256)
        images = np.load(tmp_path / "out" / "images.npy", mmap_mode="r")
        assert images.shape == (24, 256, 256, 3)


# ---------------------------------------------------------------- across formats


def test_sample_i_is_the_same_sample_in_every_format(src: Path, tmp_path: Path) -> None:
    tables = {}
    for fmt in ("wds", "lmdb", "hdf5", "npy"):
        convert(src, tmp_path / fmt, fmt, run=ConvertOptions(workers=0))
        _, table = open_dataset(tmp_path / fmt)
        tables[fmt] = table
    for fmt in ("lmdb", "hdf5", "npy"):
        assert tables[fmt].keys() == tables["wds"].keys()
        assert np.array_equal(tables[fmt].labels, tables["wds"].labels)
    for fmt in ("lmdb", "hdf5"):
        assert np.array_equal(tables[fmt].digests, tables["wds"].digests)
    for fmt in ("wds", "lmdb", "hdf5", "npy"):
        assert (tmp_path / fmt / "keys.npy").read_bytes() == (tmp_path / "wds" / "keys.npy")\
            .read_bytes()
