"""Reading a URL safely and ahead: sha256 checks on download, `pack verify URL`, shard
prefetching (and what it must not leave behind: locks in forked children, threads).
Against moto's S3 server on loopback (tests/s3_server.py)."""

from __future__ import annotations

import fcntl
import gc
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import packer
import readers.remote._cache as remote_cache
import readers.remote._locks as remote_locks
from pack_cli import main
from packer.conversion.upload import convert_remote
from packer.errors import CorruptDatasetError
from readers import PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions, RemoteOptions
from tests.s3_server import BUCKET, RUN, SHARD_SAMPLES

s3fs = pytest.importorskip("s3fs")


def test_verify_a_url(src: Path, endpoint: str, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/verified.wds"
    convert_remote(src, url, "wds", run=RUN)
    runner = CliRunner()
    result = runner.invoke(main, ["verify", url, "--source", str(src)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok: 24 samples in 5 shards")
    assert "source images present" in result.output
    fs = s3fs.S3FileSystem()
    shard = f"{BUCKET}/verified.wds/verified-00002.tar"
    data = bytearray(fs.cat_file(shard))
    data[1000] ^= 0xFF  # same size, other bytes: only the sha256 can tell
    fs.pipe(shard, bytes(data))
    result = runner.invoke(main, ["verify", url, "--json"])
    assert result.exit_code == 1
    assert f"{url}/verified-00002.tar: sha256" in result.output and "pack-verify-" not in \
        result.output
    result = runner.invoke(main, ["verify", str(tmp_path), "--storage-option", "anon=true"])
    assert result.exit_code == 2 and "applies to a URL" in result.output


def upload_with_a_damaged_shard(src: Path, name: str) -> str:
    """`src` converted to s3://BUCKET/NAME, then one bit of shard 1 flipped in storage."""
    url = f"s3://{BUCKET}/{name}"
    index = convert_remote(src, url, "wds", run=RUN)
    fs = s3fs.S3FileSystem()
    shard = f"{BUCKET}/{name}/{index.shards[1].name}"
    data = bytearray(fs.cat_file(shard))
    data[-2000] ^= 0x01
    fs.pipe(shard, bytes(data))
    return url


def test_a_shard_damaged_in_storage_never_reaches_a_reader(src: Path, endpoint: str,
                                                           tmp_path: Path) -> None:
    url = upload_with_a_damaged_shard(src, "damaged.wds")
    ds = PackedDataset(url, decode="raw", remote=RemoteOptions(cache_dir=tmp_path / "cache"))
    assert bytes(ds[0][0])  # shard 0 is intact
    with pytest.raises(CorruptDatasetError, match=r"damaged-00001\.tar: sha256"):
        ds[SHARD_SAMPLES]
    assert not list((tmp_path / "cache").rglob("damaged-00001.tar*"))  # nothing kept of it


def test_the_next_shard_is_fetched_while_one_is_read(uploaded: dict[str, Any], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fetched_by: dict[str, str] = {}
    real = remote_cache.fetch

    def spy(fs: Any, remote: str, local: Path, *args: Any, **kwargs: Any) -> None:
        fetched_by[local.name] = threading.current_thread().name
        real(fs, remote, local, *args, **kwargs)

    monkeypatch.setattr(remote_cache, "fetch", spy)
    ds = PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True, shuffle=False,
                               partition=PartitionOptions(chunk_size=SHARD_SAMPLES,
                                                          drop_last=False),
                               remote=RemoteOptions(cache_dir=tmp_path))
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
    ds = PackedIterableDataset(url, decode="raw", shuffle=False,
                               partition=PartitionOptions(chunk_size=SHARD_SAMPLES),
                               remote=RemoteOptions(cache_dir=tmp_path))
    with pytest.raises(CorruptDatasetError, match=r"damaged-later-00001\.tar: sha256"):
        for _ in ds:
            pass


def test_a_fork_during_a_fetch_leaves_no_lock_in_the_child(tmp_path: Path) -> None:
    """A prefetch thread holding a shard's fetch lock when a DataLoader forks: the child
    must not keep that lock (it would wait on itself the day it fetches the shard)."""
    lock_path = tmp_path / "00003.get"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with remote_locks._FETCH_LOCKS_GUARD:
        remote_locks._FETCH_LOCKS.add(fd)  # as ShardLocks.fetching does
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
    with remote_locks._FETCH_LOCKS_GUARD:
        remote_locks._FETCH_LOCKS.discard(fd)
    os.close(fd)  # the parent's fetch ends
    os.write(write, b"x")
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_prefetch_threads_end_with_their_pass_or_dataset(uploaded: dict[str, Any],
                                                         tmp_path: Path) -> None:
    """A pass's prefetch threads are stopped and waited for as it ends, so none is left to
    end at a moment of its own (tests/frameworks/test_fork_threads.py says why); a dataset dropped
    mid-pass tells its threads to end. Only the threads each dataset started count."""

    def prefetchers() -> set[threading.Thread]:
        return {thread for thread in threading.enumerate()
                if thread.name == "packer-prefetch" and thread.is_alive()}

    def started_by(ds: PackedIterableDataset) -> tuple[Any, set[threading.Thread]]:
        before = prefetchers()
        records = iter(ds)
        next(records)
        mine = prefetchers() - before
        assert mine, "reading a URL starts prefetch threads"
        return records, mine

    for attempt in range(3):  # a dataset made anew each time, as an epoch loop might
        ds = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False,
                                   partition=PartitionOptions(chunk_size=SHARD_SAMPLES),
                                   remote=RemoteOptions(cache_dir=tmp_path / str(attempt)))
        records, mine = started_by(ds)
        assert 1 + sum(1 for _ in records) == len(ds)
        assert not [thread for thread in mine if thread.is_alive()]  # at once, not later
    dropped = PackedIterableDataset(uploaded["url"], decode="raw", shuffle=False,
                                    partition=PartitionOptions(chunk_size=SHARD_SAMPLES),
                                    remote=RemoteOptions(cache_dir=tmp_path / "dropped"))
    records, mine = started_by(dropped)
    del dropped, records
    gc.collect()
    deadline = time.monotonic() + 10
    while any(thread.is_alive() for thread in mine) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [thread for thread in mine if thread.is_alive()]


def test_the_api_takes_a_url_where_the_cli_does(src: Path, endpoint: str) -> None:
    """packer.convert, packer.verify and packer.describe each take a folder or a URL."""
    url = f"s3://{BUCKET}/api.wds"
    packer.convert(src, url, "wds", run=RUN)
    report = packer.verify(url, src)
    assert report.ok and report.folder == url and report.num_samples == 24, report
    facts = packer.describe(url)
    assert facts["path"] == url and facts["num_samples"] == 24
    with pytest.raises(ValueError, match="storage_options and work apply to a URL"):
        packer.verify(src, storage_options={"anon": True})
