"""No thread of the readers is alive when a DataLoader forks its workers.

CPython before 3.12 can hang a forked child inside os.fork() when a thread of the parent
starts or ends at that moment (a Lightning DDP run stuck at the start of fit).
A URL dataset read in the main process starts prefetch threads (readers.remote); here a
hook lists the threads alive across every fork of a fork DataLoader that follows such a
read: none may be a prefetch thread, whether the main-process pass is under way, over,
or its dataset dropped. The hook runs in the parent right after the fork
(os.register_at_fork(after_in_parent=...)): before-hooks run in the reverse order of
registration, so one registered here would run before the readers' own and see threads
they are about to stop; after the fork, a thread alive was alive through it. The documented way out
for the frameworks' own threads, a forkserver context, is read through as well.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import readers.remote._cache as remote_cache
from readers import PackedIterableDataset
from readers.options import PartitionOptions, RemoteOptions
from tests.helpers import pack_wds

NUM, SHARD = 60, 10
PREFETCH = "packer-prefetch"
_ARMED: list[list[list[str]]] = []  # while a test records: the threads alive across each fork


def _record_threads() -> None:
    if _ARMED:
        _ARMED[0].append([thread.name for thread in threading.enumerate()])


os.register_at_fork(after_in_parent=_record_threads)


@pytest.fixture
def forks() -> Iterator[list[list[str]]]:
    """The names of the threads alive across each fork of this process during the test."""
    seen: list[list[str]] = []
    _ARMED.append(seen)
    try:
        yield seen
    finally:
        _ARMED.clear()


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = pack_wds(tmp_path_factory.mktemp("fork-threads"), NUM, SHARD, min_side=8,
                      max_side=12)
    return folder.as_uri()  # file://: read through the remote cache, with prefetch


def remote_dataset(url: str, cache: Path) -> PackedIterableDataset:
    return PackedIterableDataset(url, decode="raw", shuffle=False,
                                 partition=PartitionOptions(chunk_size=SHARD, drop_last=False),
                                 remote=RemoteOptions(cache_dir=cache))


def prefetching() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == PREFETCH]


def read_with_fork_workers(ds: PackedIterableDataset) -> int:
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    return sum(1 for _ in loader)


@pytest.mark.parametrize("main_pass", ["under way", "over", "dropped"])
def test_no_prefetch_thread_is_alive_when_a_dataloader_forks(
        url: str, tmp_path: Path, forks: list[list[str]], main_pass: str) -> None:
    ds = remote_dataset(url, tmp_path / "cache")
    records = iter(ds)
    next(records)  # the first shard read, the next ones asked for in the background
    started = prefetching()
    assert started, "reading a URL in the main process starts prefetch threads"
    if main_pass == "over":
        assert 1 + sum(1 for _ in records) == NUM
        assert not prefetching(), "the threads of a finished pass are stopped with it"
    if main_pass == "dropped":
        del ds, records
        gc.collect()
        ds = remote_dataset(url, tmp_path / "other-cache")
    assert read_with_fork_workers(ds) == NUM
    assert len(forks) == 2  # one per worker
    assert all(PREFETCH not in alive for alive in forks), forks
    assert not any(thread.is_alive() for thread in started)
    if main_pass == "under way":  # stopped for the fork, the pass reads on
        assert 1 + sum(1 for _ in records) == NUM


@pytest.mark.spawn
def test_a_forkserver_loader_reads_every_sample_once_per_epoch(url: str, tmp_path: Path) -> None:
    """The way out on Python < 3.12 where a framework's threads may race a fork: workers
    started by a fork server, persistent over epochs, exactly once each epoch."""
    ds = PackedIterableDataset(url, decode="raw", with_keys=True, batch_size=5,
                               remote=RemoteOptions(cache_dir=tmp_path / "cache"))
    loader = DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True,
                        multiprocessing_context="forkserver", collate_fn=list)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        keys = [key for batch in loader for _, _, key in batch]
        assert len(keys) == NUM and len(set(keys)) == NUM
        orders.append(keys)
    assert orders[0] != orders[1]  # a new order in epoch 1


def test_a_fork_waits_for_a_fetch_only_so_long_and_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A prefetch thread that cannot end (a store that never answers) must not hang the
    fork that waits for it: after FORK_WAIT_S the fork goes ahead, with one warning."""
    monkeypatch.setattr(remote_cache, "FORK_WAIT_S", 0.2)
    monkeypatch.setattr(remote_cache, "_WARNED", [])
    entered, release = threading.Event(), threading.Event()

    class Stuck:
        def fetch(self, shard: int) -> None:
            entered.set()
            release.wait(30)

    stuck = Stuck()
    prefetcher = remote_cache.Prefetcher(stuck.fetch, 1)
    prefetcher.ask(0)
    assert entered.wait(10)
    with caplog.at_level(logging.WARNING, logger="readers.remote"):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "1 shard prefetch thread(s) still running" in caplog.text
    release.set()
    assert prefetcher.stop(10)
    assert prefetcher.ended()
