"""Remote DST and reading through fsspec URLs, against a real S3 API (moto's server on
127.0.0.1, started once per session by tests/s3_server.py; never a real AWS
endpoint)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from torch.utils.data import DataLoader

from pack_cli import main
from pack_cli._params import parse_storage_options
from packer import ConvertOptions, convert
from packer.conversion.journal import ResumeRefused
from packer.conversion.upload import convert_remote
from packer.core.index import INDEX_NAME, KEYS_NAME, REJECTS_NAME, SAMPLES_NAME, open_dataset
from packer.encode import EncodeOptions
from packer.errors import DatasetExistsError, IncompleteDatasetError
from packer.formats.base import ShardOptions
from readers import PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions, RemoteOptions
from readers.remote import MAX_PINNED
from tests.s3_server import BUCKET, RUN, SHARD_SAMPLES, listing, local_files

s3fs = pytest.importorskip("s3fs")

def test_upload_sends_shards_as_they_end_and_index_last(uploaded: dict[str, Any]) -> None:
    index, log = uploaded["index"], uploaded["log"]
    shards = [shard.name for shard in index.shards]
    assert len(shards) == -(-index.num_samples // SHARD_SAMPLES) > 2
    # the writer's hook saw each shard end during the conversion, then commit() the last
    assert uploaded["parts"][: len(shards) - 1] == list(range(1, len(shards)))
    assert sorted(log[: len(shards)]) == shards
    assert log[len(shards)] == "plain.wids.json"  # with the data files, before the tables
    assert sorted(log[len(shards) + 1 : -1]) == sorted([SAMPLES_NAME, KEYS_NAME, REJECTS_NAME])
    assert log[-1] == INDEX_NAME
    # byte for byte what a local conversion writes
    assert listing(uploaded["url"]) == local_files(uploaded["local"])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_iterable_reads_each_sample_once_with_two_workers(uploaded: dict[str, Any],
                                                          tmp_path: Path, context: str) -> None:
    before = listing(uploaded["url"])
    ds = PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True,
                               partition=PartitionOptions(chunk_size=3, drop_last=False),
                               remote=RemoteOptions(cache_dir=tmp_path / "cache"))
    _, table = open_dataset(uploaded["local"])
    expected = {key: bytes(PackedDataset(uploaded["local"], decode="raw")[i][0])
                for i, key in enumerate(table.keys())}
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=context,
                        collate_fn=list)
    seen = [(key, bytes(data)) for batch in loader for data, _, key in batch]
    assert sorted(key for key, _ in seen) == sorted(expected)  # exactly once
    assert all(expected[key] == data for key, data in seen)
    assert listing(uploaded["url"]) == before  # reading never writes to the dataset
    assert not list((tmp_path / "cache").glob("*/*.partial"))


def test_disk_cache_is_bounded_and_evicts_least_recently_used(uploaded: dict[str, Any],
                                                              tmp_path: Path) -> None:
    index = uploaded["index"]
    ds = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False,
                               partition=PartitionOptions(chunk_size=2),
                               remote=RemoteOptions(cache_dir=tmp_path / "tiny", max_cache_bytes=1))
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert sum(1 for _ in ds) == len(ds)
    cache = ds.handles().reader.cache  # type: ignore[attr-defined]
    assert cache.num_fetched > len(index.shards)  # evicted, so fetched again
    assert len(list(ds.path.glob("*.tar"))) <= MAX_PINNED
    # with room for the last three shards, those three (the most recently used) stay
    budget = sum(shard.num_bytes for shard in index.shards[-3:])
    lru = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False,
                                partition=PartitionOptions(chunk_size=2),
                                remote=RemoteOptions(cache_dir=tmp_path / "lru",
                                                     max_cache_bytes=budget))
    assert sum(1 for _ in lru) == len(lru)
    names = sorted(path.name for path in lru.path.glob("*.tar"))
    assert names == [shard.name for shard in index.shards][-3:]
    # two workers share the cache and stay within it (pins on top)
    loader = DataLoader(PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True,
                                              remote=RemoteOptions(cache_dir=tmp_path / "two",
                                                                   max_cache_bytes=1),
                                              partition=PartitionOptions(drop_last=False)),
                        batch_size=3, num_workers=2, multiprocessing_context="fork",
                        collate_fn=list)
    keys = [key for batch in loader for _, _, key in batch]
    assert sorted(keys) == sorted(open_dataset(uploaded["local"])[1].keys())
    assert len(list((tmp_path / "two").glob("*/*.tar"))) <= 2 * MAX_PINNED


def test_map_style_reads_a_url(uploaded: dict[str, Any], tmp_path: Path) -> None:
    remote = PackedDataset(uploaded["url"], decode="raw", with_keys=True,
                           remote=RemoteOptions(cache_dir=tmp_path / "cache", max_cache_bytes=1))
    local = PackedDataset(uploaded["local"], decode="raw", with_keys=True)
    assert len(remote) == len(local)
    for i in (7, 0, len(local) - 1, 3, 12):
        assert remote[i][1:] == local[i][1:] and bytes(remote[i][0]) == bytes(local[i][0])
    copy = pickle.loads(pickle.dumps(remote))  # a URL, options and paths; no handles
    assert copy[5][2] == local[5][2]
    # forked workers after the parent read (and pinned) shards open their own handles
    loader = DataLoader(remote, batch_size=4, num_workers=2, multiprocessing_context="fork",
                        collate_fn=list)
    keys = [key for batch in loader for _, _, key in batch]
    assert keys == open_dataset(uploaded["local"])[1].keys()


def test_file_url_round_trip(src: Path, tmp_path: Path, uploaded: dict[str, Any]) -> None:
    target = tmp_path / "file" / "plain.wds"  # the twin's name: shards carry it
    index = convert(src, f"file://{target}", "wds", run=RUN)  # convert() takes a URL too
    assert local_files(target) == local_files(uploaded["local"])
    ds = PackedIterableDataset(f"file://{target}", decode="raw", with_keys=True,
                               remote=RemoteOptions(cache_dir=tmp_path / "cache"),
                               partition=PartitionOptions(drop_last=False))
    assert sorted(key for _, _, key in ds) == sorted(open_dataset(target)[1].keys())
    assert index.num_samples == len(ds)


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5", "npy"])
def test_single_file_formats(fmt: str, src: Path, tmp_path: Path, endpoint: str) -> None:
    url = f"s3://{BUCKET}/single.{fmt}"
    options = EncodeOptions(size=(24, 24)) if fmt == "npy" else None
    convert_remote(src, url, fmt, options, RUN)
    local = tmp_path / fmt
    convert(src, local, fmt, options, RUN)
    assert listing(url) == local_files(local)
    remote_ds = PackedDataset(url, decode="raw",
                              remote=RemoteOptions(cache_dir=tmp_path / "cache"))
    local_ds = PackedDataset(local, decode="raw")
    for i in (0, 11, len(local_ds) - 1):
        assert bytes(remote_ds[i][0]) == bytes(local_ds[i][0])


def test_refusals(src: Path, tmp_path: Path, uploaded: dict[str, Any]) -> None:
    url = uploaded["url"]
    with pytest.raises(DatasetExistsError, match="already holds a complete dataset"):
        convert_remote(src, url, "wds", run=RUN)
    with pytest.raises(ResumeRefused, match="needs --staging DIR"):
        convert_remote(src, f"s3://{BUCKET}/x.wds", "wds",
                       run=ConvertOptions(resume=True, workers=0))
    fs = s3fs.S3FileSystem()
    fs.pipe(f"{BUCKET}/half.wds/shard-00000.tar", b"x")  # the name shards had before
    with pytest.raises(DatasetExistsError, match="unfinished upload"):
        convert_remote(src, f"s3://{BUCKET}/half.wds", "wds", run=RUN)
    with pytest.raises(IncompleteDatasetError, match="did not finish"):
        PackedIterableDataset(f"s3://{BUCKET}/half.wds", remote=RemoteOptions(cache_dir=tmp_path))
    fs.pipe(f"{BUCKET}/foreign/notes.txt", b"mine")
    with pytest.raises(DatasetExistsError, match="not empty"):
        convert_remote(src, f"s3://{BUCKET}/foreign", "wds", run=RUN)
    with pytest.raises(ValueError, match="apply to a URL"):
        PackedIterableDataset(uploaded["local"], remote=RemoteOptions(cache_dir=tmp_path))
    # --overwrite replaces it: index.json first, so no reader sees a mix
    convert_remote(src, f"s3://{BUCKET}/half.wds", "wds",
                   run=ConvertOptions(overwrite=True, workers=0))
    assert "half-00000.tar" in listing(f"s3://{BUCKET}/half.wds")


def test_resume_with_staging_uploads_only_what_is_missing(
        src: Path, tmp_path: Path, uploaded: dict[str, Any]) -> None:
    url, staging = f"s3://{BUCKET}/resumed/plain.wds", tmp_path / "staging"
    seen = [0]

    def stop_after_three_shards(count: int) -> None:
        seen[0] += count
        if seen[0] > 3 * SHARD_SAMPLES:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_remote(src, url, "wds", run=RUN, staging=staging,
                       progress=stop_after_three_shards)
    assert INDEX_NAME not in listing(url)
    log: list[str] = []
    resumed = ConvertOptions(workers=0, resume=True,
                             shards=ShardOptions(max_samples=SHARD_SAMPLES))
    convert_remote(src, url, "wds", run=resumed, staging=staging, log=log)
    assert "plain-00000.tar" not in log and log[-1] == INDEX_NAME
    assert listing(url) == local_files(uploaded["local"])


def test_resume_of_a_complete_url_does_nothing(src: Path, uploaded: dict[str, Any]) -> None:
    """A retry of a finished upload: no --staging needed, nothing sent; other options refused."""
    url, before = uploaded["url"], listing(uploaded["url"])
    args = ["convert", str(src), url, "--to", "wds", "--workers", "0", "-q", "--resume"]
    result = CliRunner().invoke(main, [*args, "--shard-samples", str(SHARD_SAMPLES)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"nothing to resume: {url} is complete (24 samples)\n"
    result = CliRunner().invoke(main, [*args, "--shard-samples", "4"])
    assert result.exit_code == 1, result.output
    assert f"--shard-samples was {SHARD_SAMPLES}, now 4" in result.stderr
    assert "--overwrite" in result.stderr and result.stderr.count("\n") == 1
    assert listing(url) == before


def test_cli(src: Path, endpoint: str, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/cli.wds"
    runner = CliRunner()
    result = runner.invoke(main, ["convert", str(src), url, "--to", "wds", "--workers", "0",
                                  "--storage-option", f"endpoint_url={endpoint}", "-q"])
    assert result.exit_code == 0, result.output
    assert f"into {url} (wds, 8 shards, " in result.output  # the default: at least 8
    result = runner.invoke(main, ["info", url, "--json"])
    assert result.exit_code == 0, result.output
    assert '"num_samples": 24' in result.output and url in result.output
    result = runner.invoke(main, ["convert", str(src), str(tmp_path / "x"), "--to", "wds",
                                  "--staging", str(tmp_path / "s")])
    assert result.exit_code == 2 and "apply to a URL DST" in result.output
    result = runner.invoke(main, ["convert", str(src), url, "--to", "wds", "-q"])
    assert result.exit_code == 1 and "already holds a complete dataset" in result.output
    result = runner.invoke(main, ["info", f"s3://{BUCKET}/nothing-here"])
    assert result.exit_code == 1 and "no index.json" in result.output


def test_parse_storage_options() -> None:
    assert parse_storage_options(["endpoint_url=http://h:9000", "anon=true", "n=8",
                                  'key="123"', "client_kwargs.region_name=eu-west-1",
                                  "client_kwargs.verify=false"]) == {
        "endpoint_url": "http://h:9000", "anon": True, "n": 8, "key": "123",
        "client_kwargs": {"region_name": "eu-west-1", "verify": False}}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_storage_options(["novalue"])


@pytest.mark.parametrize("fmt", ["lmdb", "hdf5"])
def test_appended_parts_read_from_a_url(fmt: str, src: Path, tmp_path: Path,
                                        endpoint: str) -> None:
    """Every part of an appended lmdb or hdf5 is fetched and pinned with the reader."""
    from packer import append
    from packer.testing import make_sample_folder

    local = tmp_path / f"grown.{fmt}"
    grown = tmp_path / "grown-src"
    shutil.copytree(src, grown)
    convert(grown, local, fmt, run=RUN)
    for seed in (5, 6):  # two appends: three parts
        more = make_sample_folder(tmp_path / f"more{seed}", count=4, classes=2, seed=seed,
                                  min_side=32, max_side=48)
        for path in more.rglob("*.*"):
            shutil.copy(path, grown / path.parent.name / f"new{seed}_{path.name}")
        append(grown, local, workers=0)
    index = open_dataset(local)[0]
    assert len(index.shards) == 3 > MAX_PINNED
    s3fs.S3FileSystem().put(str(local), f"{BUCKET}/grown.{fmt}", recursive=True)
    remote_ds = PackedDataset(f"s3://{BUCKET}/grown.{fmt}", decode="raw",
                              remote=RemoteOptions(cache_dir=tmp_path / "cache"))
    local_ds = PackedDataset(local, decode="raw")
    every = list(range(len(local_ds)))
    assert [bytes(s[0]) for s in remote_ds.__getitems__(every[::-1])] == \
        [bytes(s[0]) for s in local_ds.__getitems__(every[::-1])]
    assert [bytes(remote_ds[i][0]) for i in every] == [bytes(local_ds[i][0]) for i in every]
