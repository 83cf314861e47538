"""The conformance suite's contract: what every format must do (FormatContract).

tests/project/test_contract.py holds one small subclass per format.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert, formats
from packer.api import verify
from packer.conversion.job import effective_options
from packer.core.index import INDEX_NAME, open_dataset, read_index
from packer.core.record import Record
from packer.encode import EncodeOptions, digest_of, encode_item
from packer.errors import DatasetExistsError, IncompleteDatasetError
from packer.formats import _npy
from packer.formats.base import ShardOptions
from packer.source.scan import scan
from readers._base import remote_source
from readers.options import RemoteOptions
from readers.ram.chunk_cache import CachedReader
from readers.remote import remote_reader
from tests.helpers import KILL_SEED, count_adds, pack_command, tree_hashes, wait_for_state

# Kill rounds per format; raise it to hunt for rare crash windows, e.g.
# PACKER_KILL_ROUNDS=50 PACKER_KILL_SEED=123 pytest tests/project/test_contract.py -k sigkill
KILL_ROUNDS = int(os.environ.get("PACKER_KILL_ROUNDS", "3"))


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
    shards: ClassVar[ShardOptions] = ShardOptions.spread()  # the CLI's default
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
