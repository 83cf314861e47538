"""Remote DST and reading through fsspec URLs, against a real S3 API (moto's server, loopback).

The module fixture starts moto's server on 127.0.0.1, points the standard AWS variables
at it (never a real AWS endpoint) and stops it afterwards.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from torch.utils.data import DataLoader

import readers.remote as remote_module
from packer import convert
from packer.cli import main
from packer.convert import ConvertOptions
from packer.encode import EncodeOptions
from packer.errors import CorruptDatasetError, DatasetExistsError, IncompleteDatasetError
from packer.formats.base import ShardOptions
from packer.index import INDEX_NAME, KEYS_NAME, REJECTS_NAME, SAMPLES_NAME, open_dataset
from packer.journal import ResumeRefused
from packer.remote import parse_storage_options
from packer.upload import Uploader, convert_remote
from readers import PackedDataset, PackedIterableDataset
from readers.remote import MAX_PINNED

s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "packer-test"
SHARD_SAMPLES = 5
RUN = ConvertOptions(workers=0, shards=ShardOptions(max_samples=SHARD_SAMPLES))


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's S3 server on loopback, a bucket, and AWS_* variables pointing at it."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ENDPOINT_URL", url)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        s3fs.S3FileSystem.clear_instance_cache()
        s3fs.S3FileSystem().mkdir(BUCKET)
        try:
            yield url
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()


def listing(url: str) -> dict[str, str]:
    """Name -> sha256 of every object below a prefix."""
    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return {path[len(root) + 1 :]: hashlib.sha256(fs.cat_file(path)).hexdigest()
            for path in fs.find(root)}


def local_files(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def uploaded(endpoint: str, src: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """`src` converted to S3 (wds, several shards), the upload order, and a local twin."""
    url = f"s3://{BUCKET}/plain.wds"
    log: list[str] = []
    parts: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        real = Uploader.shards_done

        def shards_done(self: Uploader, shards: Any) -> None:
            parts.append(len(tuple(shards)))
            real(self, shards)

        patch.setattr(Uploader, "shards_done", shards_done)
        index = convert_remote(src, url, "wds", run=RUN, log=log)
    local = tmp_path_factory.mktemp("twin") / "plain.wds"
    convert(src, local, "wds", run=RUN)
    return {"url": url, "index": index, "log": log, "parts": parts, "local": local}


def test_upload_sends_shards_as_they_end_and_index_last(uploaded: dict[str, Any]) -> None:
    index, log = uploaded["index"], uploaded["log"]
    shards = [shard.name for shard in index.shards]
    assert len(shards) == -(-index.num_samples // SHARD_SAMPLES) > 2
    # the writer's hook saw each shard end during the conversion, then commit() the last
    assert uploaded["parts"][: len(shards) - 1] == list(range(1, len(shards)))
    assert sorted(log[: len(shards)]) == shards
    assert sorted(log[len(shards) : -1]) == sorted([SAMPLES_NAME, KEYS_NAME, REJECTS_NAME])
    assert log[-1] == INDEX_NAME
    # byte for byte what a local conversion writes
    assert listing(uploaded["url"]) == local_files(uploaded["local"])


def test_iterable_reads_each_sample_once_with_two_workers(uploaded: dict[str, Any],
                                                          tmp_path: Path) -> None:
    before = listing(uploaded["url"])
    ds = PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True, chunk_size=3,
                               cache_dir=tmp_path / "cache", drop_last=False)
    _, table = open_dataset(uploaded["local"])
    expected = {key: bytes(PackedDataset(uploaded["local"], decode="raw")[i][0])
                for i, key in enumerate(table.keys())}
    seen: list[tuple[str, bytes]] = []
    for context in ("fork", "spawn"):
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
    ds = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False, chunk_size=2,
                               cache_dir=tmp_path / "tiny", cache_bytes=1)
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert sum(1 for _ in ds) == len(ds)
    cache = ds._local().reader.cache  # type: ignore[attr-defined]
    assert cache.num_fetched > len(index.shards)  # evicted, so fetched again
    assert len(list(ds.path.glob("shard-*.tar"))) <= MAX_PINNED
    # with room for the last three shards, those three (the most recently used) stay
    budget = sum(shard.num_bytes for shard in index.shards[-3:])
    lru = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False, chunk_size=2,
                                cache_dir=tmp_path / "lru", cache_bytes=budget)
    assert sum(1 for _ in lru) == len(lru)
    names = sorted(path.name for path in lru.path.glob("shard-*.tar"))
    assert names == [shard.name for shard in index.shards][-3:]
    # two workers share the cache and stay within it (pins on top)
    loader = DataLoader(PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True,
                                              cache_dir=tmp_path / "two", cache_bytes=1,
                                              drop_last=False),
                        batch_size=3, num_workers=2, multiprocessing_context="fork",
                        collate_fn=list)
    keys = [key for batch in loader for _, _, key in batch]
    assert sorted(keys) == sorted(open_dataset(uploaded["local"])[1].keys())
    assert len(list((tmp_path / "two").glob("*/shard-*.tar"))) <= 2 * MAX_PINNED


def test_map_style_reads_a_url(uploaded: dict[str, Any], tmp_path: Path) -> None:
    remote = PackedDataset(uploaded["url"], decode="raw", with_keys=True,
                           cache_dir=tmp_path / "cache", cache_dir_bytes=1)
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
    target = tmp_path / "out.wds"
    index = convert(src, f"file://{target}", "wds", run=RUN)  # convert() takes a URL too
    assert local_files(target) == local_files(uploaded["local"])
    ds = PackedIterableDataset(f"file://{target}", decode="raw", with_keys=True,
                               cache_dir=tmp_path / "cache", drop_last=False)
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
    remote_ds = PackedDataset(url, decode="raw", cache_dir=tmp_path / "cache")
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
    fs.pipe(f"{BUCKET}/half.wds/shard-00000.tar", b"x")
    with pytest.raises(DatasetExistsError, match="unfinished upload"):
        convert_remote(src, f"s3://{BUCKET}/half.wds", "wds", run=RUN)
    with pytest.raises(IncompleteDatasetError, match="did not finish"):
        PackedIterableDataset(f"s3://{BUCKET}/half.wds", cache_dir=tmp_path)
    fs.pipe(f"{BUCKET}/foreign/notes.txt", b"mine")
    with pytest.raises(DatasetExistsError, match="not empty"):
        convert_remote(src, f"s3://{BUCKET}/foreign", "wds", run=RUN)
    with pytest.raises(ValueError, match="apply to a URL"):
        PackedIterableDataset(uploaded["local"], cache_dir=tmp_path)
    # --overwrite replaces it: index.json first, so no reader sees a mix
    convert_remote(src, f"s3://{BUCKET}/half.wds", "wds",
                   run=ConvertOptions(overwrite=True, workers=0))
    assert "shard-00000.tar" in listing(f"s3://{BUCKET}/half.wds")


def test_resume_with_staging_uploads_only_what_is_missing(
        src: Path, tmp_path: Path, uploaded: dict[str, Any]) -> None:
    url, staging = f"s3://{BUCKET}/resumed.wds", tmp_path / "staging"
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
    assert "shard-00000.tar" not in log and log[-1] == INDEX_NAME
    assert listing(url) == local_files(uploaded["local"])


def test_cli(src: Path, endpoint: str, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/cli.wds"
    runner = CliRunner()
    result = runner.invoke(main, ["convert", str(src), url, "--to", "wds", "--workers", "0",
                                  "--storage-option", f"endpoint_url={endpoint}", "-q"])
    assert result.exit_code == 0, result.output
    assert f"into {url} (wds, 1 shard(s))" in result.output
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


def test_verify_a_url(src: Path, endpoint: str, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/verified.wds"
    convert_remote(src, url, "wds", run=RUN)
    runner = CliRunner()
    result = runner.invoke(main, ["verify", url, "--source", str(src)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: 24 samples in 5 shard(s)")
    assert "source images present" in result.output
    fs = s3fs.S3FileSystem()
    shard = f"{BUCKET}/verified.wds/shard-00002.tar"
    data = bytearray(fs.cat_file(shard))
    data[1000] ^= 0xFF  # same size, other bytes: only the sha256 can tell
    fs.pipe(shard, bytes(data))
    result = runner.invoke(main, ["verify", url, "--json"])
    assert result.exit_code == 1
    assert f"{url}/shard-00002.tar: sha256" in result.output and "pack-verify-" not in \
        result.output
    result = runner.invoke(main, ["verify", str(tmp_path), "--storage-option", "anon=true"])
    assert result.exit_code == 2 and "applies to a URL" in result.output


def upload_with_a_damaged_shard(src: Path, name: str) -> str:
    """`src` converted to s3://BUCKET/NAME, then one bit of shard 1 flipped in storage."""
    url = f"s3://{BUCKET}/{name}"
    convert_remote(src, url, "wds", run=RUN)
    fs = s3fs.S3FileSystem()
    shard = f"{BUCKET}/{name}/shard-00001.tar"
    data = bytearray(fs.cat_file(shard))
    data[-2000] ^= 0x01
    fs.pipe(shard, bytes(data))
    return url


def test_a_shard_damaged_in_storage_never_reaches_a_reader(src: Path, endpoint: str,
                                                           tmp_path: Path) -> None:
    url = upload_with_a_damaged_shard(src, "damaged.wds")
    ds = PackedDataset(url, decode="raw", cache_dir=tmp_path / "cache")
    assert bytes(ds[0][0])  # shard 0 is intact
    with pytest.raises(CorruptDatasetError, match=r"shard-00001\.tar: sha256"):
        ds[SHARD_SAMPLES]
    assert not list((tmp_path / "cache").rglob("shard-00001.tar*"))  # nothing kept of it


def test_the_next_shard_is_fetched_while_one_is_read(uploaded: dict[str, Any], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fetched_by: dict[str, str] = {}
    real = remote_module.fetch

    def spy(fs: Any, remote: str, local: Path, *args: Any, **kwargs: Any) -> None:
        fetched_by[local.name] = threading.current_thread().name
        real(fs, remote, local, *args, **kwargs)

    monkeypatch.setattr(remote_module, "fetch", spy)
    ds = PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True, shuffle=False,
                               chunk_size=SHARD_SAMPLES, cache_dir=tmp_path, drop_last=False)
    seen = {key: bytes(data) for data, _, key in ds}
    local = PackedDataset(uploaded["local"], decode="raw", with_keys=True)
    assert seen == {key: bytes(data) for data, _, key in (local[i] for i in range(len(local)))}
    shards = [shard.name for shard in uploaded["index"].shards]
    assert sorted(fetched_by) == sorted(shards)  # each fetched once, by one thread or other
    assert fetched_by[shards[0]] == "MainThread"  # nothing to read ahead of the first
    assert "packer-prefetch" in fetched_by.values()


def test_a_failed_prefetch_is_reported_by_the_read(src: Path, endpoint: str,
                                                   tmp_path: Path) -> None:
    url = upload_with_a_damaged_shard(src, "damaged-later.wds")
    ds = PackedIterableDataset(url, decode="raw", shuffle=False, chunk_size=SHARD_SAMPLES,
                               cache_dir=tmp_path)
    with pytest.raises(CorruptDatasetError, match=r"shard-00001\.tar: sha256"):
        for _ in ds:
            pass


def test_a_fork_during_a_fetch_leaves_no_lock_in_the_child(tmp_path: Path) -> None:
    """A prefetch thread holding a shard's fetch lock when a DataLoader forks: the child
    must not keep that lock (it would wait on itself the day it fetches the shard)."""
    lock_path = tmp_path / "00003.get"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with remote_module._FETCH_LOCKS_GUARD:
        remote_module._FETCH_LOCKS.add(fd)  # as ShardCache._fetch does
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait until the parent's fetch is over, then take the lock
        os.close(write)
        os.read(read, 1)
        probe = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os._exit(0)
        except BlockingIOError:
            os._exit(1)
    os.close(read)
    with remote_module._FETCH_LOCKS_GUARD:
        remote_module._FETCH_LOCKS.discard(fd)
    os.close(fd)  # the parent's fetch ends
    os.write(write, b"x")
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_prefetch_threads_end_with_their_dataset(uploaded: dict[str, Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote_module, "PREFETCH_IDLE_S", 0.1)

    def prefetchers() -> int:
        return sum(thread.name == "packer-prefetch" and thread.is_alive()
                   for thread in threading.enumerate())

    before = prefetchers()
    for attempt in range(3):  # a dataset made anew each time, as an epoch loop might
        ds = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False,
                                   chunk_size=SHARD_SAMPLES, cache_dir=tmp_path / str(attempt))
        assert sum(1 for _ in ds) == len(ds)
        assert prefetchers() > before
        del ds
    gc.collect()
    deadline = time.monotonic() + 10
    while prefetchers() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert prefetchers() == before
