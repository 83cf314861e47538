"""The conformance suite: one FormatContract class, one small subclass per format.

Every format must round-trip keys, labels and bytes; be readable by its stock tool
without our code; give identical files for any number of workers; resume to the same
bytes as an uninterrupted run; survive SIGKILL at any moment as either a complete
dataset or one that is refused until resumed; and refuse to clobber a complete DST.
The readers' wrappers (the chunk cache, a URL mirror's reader) read every format alike.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import h5py
import lmdb
import numpy as np
import pytest
import webdataset
from click.testing import CliRunner
from PIL import Image

from pack_cli import main
from packer import ConvertOptions, convert, formats
from packer.api import verify
from packer.conversion.job import effective_options
from packer.core.index import INDEX_NAME, open_dataset, read_index
from packer.core.record import Record
from packer.encode import EncodeOptions, digest_of, encode_item
from packer.errors import DatasetExistsError, IncompleteDatasetError
from packer.formats import _lmdb, _npy
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from readers.cache import CachedReader
from readers.options import RemoteOptions
from readers.remote import remote_reader, remote_source
from tests.helpers import count_adds, pack_command, tree_hashes, wait_for_state

# Kill rounds per format; raise it to hunt for rare crash windows, e.g.
# PACKER_KILL_ROUNDS=50 PACKER_KILL_SEED=123 pytest tests/test_contract.py -k sigkill
KILL_ROUNDS = int(os.environ.get("PACKER_KILL_ROUNDS", "3"))
KILL_SEED = os.environ.get("PACKER_KILL_SEED") or os.urandom(4).hex()


@dataclass(frozen=True)
class Sample:
    """What a reader gives back for one sample; None where the format does not store it."""

    key: str | None
    label: int
    ext: str | None
    data: bytes


def expected_samples(src: Path, fmt: str, options: EncodeOptions | None = None) -> list[Sample]:
    """What a dataset of `src` must hold, from the scan and the encoder."""
    encode = effective_options(fmt, options or EncodeOptions())
    out = []
    for item in scan(src).items:
        result = encode_item(item, encode)
        if isinstance(result, Record):
            out.append(Sample(result.key, result.label, result.ext, result.data))
    return out


class FormatContract:
    """Tests every format must pass; subclasses set `fmt` and read with the stock tool."""

    fmt: ClassVar[str]
    passthrough: ClassVar[bool] = True
    shards: ClassVar[ShardOptions] = ShardOptions()
    cli_args: ClassVar[tuple[str, ...]] = ()
    keeps_parts: ClassVar[bool] = False  # resume keeps finished parts instead of redoing

    def stock_read(self, dst: Path) -> list[Sample]:
        """Read every sample with the format's stock library, not with packer."""
        raise NotImplementedError

    def run(self, **changes: Any) -> ConvertOptions:
        return ConvertOptions(shards=self.shards, **{"workers": 0, **changes})

    @pytest.fixture(params=["plain", "odd"])
    def source(self, request: pytest.FixtureRequest) -> Path:
        name = "src" if request.param == "plain" else "odd_src"
        path: Path = request.getfixturevalue(name)
        return path

    def test_round_trip_keys_labels_bytes(self, source: Path, tmp_path: Path) -> None:
        before = tree_hashes(source)
        dst = tmp_path / "out"
        index = convert(source, dst, self.fmt, run=self.run())
        assert tree_hashes(source) == before, "the source was modified"
        expected = expected_samples(source, self.fmt)
        scanned = scan(source)
        loaded, table = open_dataset(dst)
        assert index == loaded
        assert loaded.format == self.fmt
        assert loaded.num_samples == len(expected) == len(scanned.items)
        assert loaded.num_rejected == 0
        assert loaded.class_names == scanned.class_names
        assert table.keys() == [s.key for s in expected]
        assert table.labels.tolist() == [s.label for s in expected]
        reader = formats.load(self.fmt).open_reader(dst, loaded, table)
        try:
            data = list(reader.read_range(0, len(expected)))
            assert data == [s.data for s in expected]
            assert [reader.read(i) for i in range(len(expected))] == data
            assert reader.read_many([3, 0, 3]) == [data[3], data[0], data[3]]
        finally:
            reader.close()
        for i, sample in enumerate(expected):
            assert table.digest(i) == digest_of(sample.data)
        if self.passthrough:  # the original files, bit for bit
            for i, item in enumerate(scanned.items):
                assert data[i] == Path(item.path).read_bytes(), item.path
        report = verify(dst, source)
        assert report.ok, report.problem
        assert tree_hashes(source) == before, "verify modified the source"

    def test_wrapped_readers_read_what_the_reader_reads(self, src: Path,
                                                         tmp_path: Path) -> None:
        """The readers' chunk cache, and the reader of a URL's mirror, over this format."""
        dst = tmp_path / "out"
        convert(src, dst, self.fmt, run=self.run())
        index, table = open_dataset(dst)
        module = formats.load(self.fmt)
        n = index.num_samples
        order = [5, 0, 1, 2, 3, n - 1, 4, 5, 6, 7, 5]
        plain = module.open_reader(dst, index, table)
        try:
            expected = list(plain.read_range(0, n))
            cached = CachedReader(plain, n, chunk_size=4, cache_bytes=1 << 20)
            for _ in range(2):  # cold, then served from promoted chunks
                assert cached.read_many(order) == [expected[i] for i in order]
            assert cached.read_many(list(range(n))) == expected
        finally:
            plain.close()
        source = remote_source(dst.as_uri(), RemoteOptions(cache_dir=tmp_path / "cache"))
        assert source is not None
        mirror, mirror_table = open_dataset(source.folder)
        remote = remote_reader(lambda: module.open_reader(source.folder, mirror, mirror_table),
                               source, mirror)
        try:
            assert list(remote.read_range(0, n)) == expected
            assert [remote.read(i) for i in order] == [expected[i] for i in order]
            assert remote.read_many(order) == [expected[i] for i in order]
        finally:
            remote.close()

    def test_stock_tool_reads_every_sample(self, source: Path, tmp_path: Path) -> None:
        dst = tmp_path / "out"
        convert(source, dst, self.fmt, run=self.run())
        expected = expected_samples(source, self.fmt)
        got = self.stock_read(dst)
        assert len(got) == len(expected)
        for sample, want in zip(got, expected, strict=True):
            assert sample.key in (None, want.key)
            assert sample.ext in (None, want.ext)
            assert (sample.label, sample.data) == (want.label, want.data), want.key

    def test_workers_give_identical_files(self, src: Path, tmp_path: Path) -> None:
        trees = []
        for workers in (0, 1, 2):
            dst = tmp_path / f"w{workers}" / "out"  # one name: wds shards carry it
            convert(src, dst, self.fmt, run=self.run(workers=workers))
            trees.append(tree_hashes(dst))
        assert trees[0] == trees[1] == trees[2]

    def test_resume_equals_uninterrupted(self, mixed_src: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_npy, "PART_SAMPLES", 4)  # parts small enough to keep some
        convert(mixed_src, tmp_path / "ref" / "out", self.fmt, run=self.run())
        dst = tmp_path / "out"
        with pytest.raises(RuntimeError, match="injected"), \
                count_adds(monkeypatch, self.fmt, fail_after=13):
            convert(mixed_src, dst, self.fmt, run=self.run())
        assert not (dst / INDEX_NAME).exists()
        with pytest.raises(IncompleteDatasetError, match="did not finish"):
            read_index(dst)
        with pytest.raises(DatasetExistsError, match="--resume"):
            convert(mixed_src, dst, self.fmt, run=self.run())
        with count_adds(monkeypatch, self.fmt) as adds:
            index = convert(mixed_src, dst, self.fmt, run=self.run(resume=True))
        assert tree_hashes(dst) == tree_hashes(tmp_path / "ref" / "out")
        assert not (dst / ".pack-state").exists()
        assert index.num_rejected == 2
        if self.keeps_parts:
            assert adds[0] < index.num_samples, "resume redid parts that were durable"

    @pytest.fixture(scope="class")
    @classmethod
    def kill_reference(cls, mixed_src: Path,
                       tmp_path_factory: pytest.TempPathFactory) -> KillReference:
        """An uninterrupted subprocess run: its files and how long its phases take."""
        dst = tmp_path_factory.mktemp(f"kill-ref-{cls.fmt}") / "out"
        start = time.monotonic()
        proc = subprocess.Popen(cls.convert_argv(mixed_src, dst), stderr=subprocess.PIPE)
        writing = wait_for_state(proc, dst)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr.decode()
        end = time.monotonic()
        return KillReference(tree_hashes(dst), end - start, end - (writing or start))

    @classmethod
    def convert_argv(cls, src: Path, dst: Path, workers: int = 0) -> list[str]:
        return [*pack_command(), "convert", str(src), str(dst), "--to", cls.fmt,
                "--workers", str(workers), "-q", *cls.cli_args]

    @pytest.mark.parametrize("round_", range(KILL_ROUNDS))
    def test_sigkill_leaves_complete_or_refused(self, mixed_src: Path, tmp_path: Path,
                                                kill_reference: KillReference,
                                                round_: int) -> None:
        rng = random.Random(f"{KILL_SEED}:{self.fmt}:{round_}")
        dst = tmp_path / "out"
        argv = self.convert_argv(mixed_src, dst, workers=2 if round_ % 2 else 0)
        proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if round_ == 0:  # anywhere, start-up included
            time.sleep(rng.uniform(0, kill_reference.total_s))
        else:  # while writing
            wait_for_state(proc, dst)
            time.sleep(rng.uniform(0, 1.2 * kill_reference.writing_s))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        where = f"(PACKER_KILL_SEED={KILL_SEED}, round {round_})"
        runner = CliRunner()
        if (dst / INDEX_NAME).exists():
            result = runner.invoke(main, ["verify", str(dst), "--source", str(mixed_src)])
            assert result.exit_code == 0, f"{result.output} {where}"
        else:
            result = runner.invoke(main, ["info", str(dst)])
            assert result.exit_code == 1, where
            assert "did not finish" in result.stderr or "no such dataset" in result.stderr, \
                f"{result.stderr} {where}"
            assert "Traceback" not in result.output
            convert(mixed_src, dst, self.fmt, run=self.run(resume=True))
        assert tree_hashes(dst) == kill_reference.tree, where

    def test_complete_dst_refused_without_overwrite(self, src: Path, tmp_path: Path) -> None:
        dst = tmp_path / "out"
        convert(src, dst, self.fmt, run=self.run())
        first = tree_hashes(dst)
        with pytest.raises(DatasetExistsError, match="--overwrite"):
            convert(src, dst, self.fmt, run=self.run())
        assert tree_hashes(dst) == first
        convert(src, dst, self.fmt, run=self.run(overwrite=True))
        assert tree_hashes(dst) == first

    def test_resume_of_a_complete_dst_is_a_no_op(self, src: Path, tmp_path: Path) -> None:
        """Invariant 9: re-running finished work succeeds and changes nothing."""
        dst = tmp_path / "out"
        index = convert(src, dst, self.fmt, run=self.run())
        first = tree_hashes(dst)
        again = convert(src, dst, self.fmt, run=self.run(resume=True))
        assert (again.num_samples, again.shards) == (index.num_samples, index.shards)
        assert tree_hashes(dst) == first


@dataclass(frozen=True)
class KillReference:
    tree: dict[str, str]
    total_s: float
    writing_s: float


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
        monkeypatch.setattr(_lmdb, "INITIAL_MAP", 64 << 10)  # far too small: must grow
        monkeypatch.setattr(_lmdb, "TXN_BYTES", 32 << 10)  # several transactions
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
