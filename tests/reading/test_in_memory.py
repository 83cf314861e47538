"""in_memory=True: one copy per node in a tmpfs, shared by every worker and rank, removed
when the last user ends (a SIGKILL included), refused when it would not fit."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader, Dataset

from readers import PackedDataset, PackedIterableDataset
from readers.options import PartitionOptions, RemoteOptions
from readers.ram import _tmpfs, memory_limit
from readers.ram.copies import remove_unused
from tests.helpers import pack_every_format


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("ram"), count=24, npy_size=(16, 16),
                             min_side=32, max_side=64)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private RAM folder for the test (inherited by spawned workers and children)."""
    monkeypatch.setenv("PACKER_RAM_DIR", str(tmp_path / "ram"))
    return tmp_path / "ram"


def segments(root: Path) -> list[Path]:
    """The published copies in `root` (not the lock files, not a copy being built)."""
    return [p for p in root.glob("packer-ram-*") if p.is_dir() and ".tmp-" not in p.name]


def wait_until_empty(root: Path) -> list[str]:
    """What is left in `root` once the watcher has removed the copy (or after 60 s)."""
    deadline = time.monotonic() + 60
    while (left := sorted(p.name for p in root.glob("*"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def raw(sample: Any) -> bytes:
    return bytes(memoryview(sample).cast("B")) if not isinstance(sample, bytes) else sample


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5", "npy"])
def test_every_format_reads_what_the_disk_holds(packed: dict[str, Path], root: Path,
                                               fmt: str) -> None:
    disk = PackedDataset(packed[fmt], decode="raw", with_keys=True)
    ram = PackedDataset(packed[fmt], decode="raw", with_keys=True, in_memory=True)
    assert ram.path.parent == root and segments(root) == [ram.path]
    assert [(raw(d), label, key) for d, label, key in ram] == \
        [(raw(d), label, key) for d, label, key in disk]
    stream = PackedIterableDataset(packed[fmt], decode="raw", with_keys=True, in_memory=True,
                                   shuffle=False, partition=PartitionOptions(drop_last=False))
    assert stream.path == ram.path  # the same copy
    assert sorted((key, raw(d)) for d, _, key in stream) == \
        sorted((key, raw(d)) for d, _, key in disk)
    del ram, stream
    assert wait_until_empty(root) == []  # the last user gone, the copy goes


class Where(Dataset[tuple[bytes, str, int, int]]):
    """Each sample with where this process read it from: the copy, its inode, the copies."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.inner = PackedDataset(folder, decode="raw", in_memory=True)
        self.root = root

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> tuple[bytes, str, int, int]:
        data = raw(self.inner[i][0])
        ino = (self.inner.path / "images.npy").stat().st_ino
        return data, str(self.inner.path), ino, len(segments(self.root))


def _rank(folder: Path, root: Path, context: str, barrier: Any, out: Any) -> None:
    barrier.wait()  # both ranks build at once: one copy must come of it
    loader = DataLoader(Where(folder, root), batch_size=None, num_workers=2,
                        multiprocessing_context=context)
    out.put([(data, path, ino, count) for data, path, ino, count in loader])


def test_two_ranks_with_two_workers_each_share_one_copy(packed: dict[str, Path],
                                                        root: Path) -> None:
    """Ranks as separate processes that each make the dataset (fork: cheap to start;
    nothing is inherited, the dataset is made after the fork); spawn workers: below."""
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    ranks = [ctx.Process(target=_rank, args=(packed["npy"], root, "fork", barrier, out))
             for _ in range(2)]
    for rank in ranks:
        rank.start()
    results = [out.get(timeout=120) for _ in ranks]
    for rank in ranks:
        rank.join(timeout=60)
        assert rank.exitcode == 0
    disk = PackedDataset(packed["npy"], decode="raw")
    expected = [raw(disk[i][0]) for i in range(len(disk))]
    for result in results:
        assert [data for data, *_ in result] == expected
    assert len({(path, ino) for result in results for _, path, ino, _ in result}) == 1
    assert {count for result in results for *_, count in result} == {1}
    assert wait_until_empty(root) == []


@pytest.mark.parametrize(("num_workers", "context"),
                         [(0, None), (2, "fork"), (2, "spawn"), (2, "forkserver")])
def test_dataloader_reads_every_sample_once(packed: dict[str, Path], root: Path,
                                            num_workers: int, context: str | None) -> None:
    ds = PackedIterableDataset(packed["lmdb"], decode="raw", with_keys=True, in_memory=True,
                               seed=3, partition=PartitionOptions(chunk_size=4, drop_last=False))
    loader = DataLoader(ds, batch_size=None, num_workers=num_workers,
                        multiprocessing_context=context)
    got = [(key, raw(data)) for data, _, key in loader]
    disk = PackedIterableDataset(packed["lmdb"], decode="raw", with_keys=True, seed=3,
                                 partition=PartitionOptions(chunk_size=4, drop_last=False))
    forked = DataLoader(disk, batch_size=None, num_workers=num_workers,  # cheap to start,
                        multiprocessing_context="fork" if num_workers else None)  # same order
    assert got == [(key, raw(data)) for data, _, key in forked]  # bit for bit
    assert len(segments(root)) == 1


def _owner(folder: Path, mode: str, ready: Any) -> None:
    """Make the copy, its way, and wait to be killed."""
    if mode == "no-watcher":
        _tmpfs._start_watcher = lambda paths: None  # type: ignore[assignment]
    if mode == "stuck":  # to be killed half way through the copy
        real = _tmpfs.attach

        def stuck(paths: _tmpfs.Paths, build: Callable[[Path], None]) -> int:
            return real(paths, lambda f: (build(f), ready.put("ready"), time.sleep(600))[0])

        _tmpfs.attach = stuck  # type: ignore[assignment]
    ds = PackedDataset(folder, in_memory=True)
    ready.put("ready")
    time.sleep(600 + len(ds))


def _killed_owner(folder: Path, mode: str) -> None:
    """Run a process that makes the copy (its way), then SIGKILL it."""
    ctx = multiprocessing.get_context("fork")  # cheap to start: it has torch already
    ready = ctx.Queue()
    owner = ctx.Process(target=_owner, args=(folder, mode, ready))
    owner.start()
    assert ready.get(timeout=60) == "ready"
    os.kill(owner.pid or 0, signal.SIGKILL)
    owner.join()


def test_a_killed_owner_leaves_nothing(packed: dict[str, Path], root: Path) -> None:
    _killed_owner(packed["hdf5"], "plain")
    assert wait_until_empty(root) == []  # its watcher saw the last user go


@pytest.mark.parametrize("mode", ["no-watcher", "stuck"])
def test_what_a_dead_owner_left_is_swept(packed: dict[str, Path], root: Path,
                                         mode: str) -> None:
    _killed_owner(packed["hdf5"], mode)
    assert list(root.glob("packer-ram-*"))  # left behind: no watcher, or half a copy
    ds = PackedDataset(packed["npy"], in_memory=True)  # any later copy sweeps the node
    assert [p.name for p in root.glob("packer-ram-*") if ds.path.name not in p.name] == []
    again = PackedDataset(packed["hdf5"], decode="raw", in_memory=True)
    assert raw(again[3][0]) == raw(PackedDataset(packed["hdf5"], decode="raw")[3][0])
    del ds, again
    assert wait_until_empty(root) == [] and remove_unused() == []


def _fake_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
                 limit: int, usage: int) -> None:
    fs = tmp_path / "cgroup"
    if version == "v2":
        (tmp_path / "self").write_text("0::/job/step\n")
        (fs / "job" / "step").mkdir(parents=True)
        (fs / "job" / "memory.max").write_text(f"{limit}\n")
        (fs / "job" / "memory.current").write_text(f"{usage + 4096}\n")
        (fs / "job" / "memory.stat").write_text("anon 1\nfile 8192\nshmem 4096\n")
        (fs / "job" / "step" / "memory.max").write_text("max\n")
    else:
        (tmp_path / "self").write_text("4:memory:/docker/abc\n1:cpu:/\n")
        (fs / "memory" / "docker" / "abc").mkdir(parents=True)
        group = fs / "memory" / "docker" / "abc"
        (group / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (group / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (group / "memory.stat").write_text("cache 0\nrss 1\n")
    monkeypatch.setattr(memory_limit, "PROC_CGROUP", tmp_path / "self")
    monkeypatch.setattr(memory_limit, "CGROUP_ROOT", fs)


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_refuses_a_copy_over_the_cgroup_limit(packed: dict[str, Path], root: Path,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              version: str) -> None:
    limit = 300 * 2**20
    usage = limit - memory_limit.MIN_HEADROOM - 1000  # room for the headroom, not the data
    _fake_cgroup(tmp_path, monkeypatch, version, limit, usage)
    assert memory_limit.memory_room().num_bytes == limit - usage
    with pytest.raises(MemoryError) as refused:
        PackedDataset(packed["wds"], in_memory=True)
    message = str(refused.value)
    need = sum(f.stat().st_size for f in packed["wds"].iterdir()
               if f.name not in ("rejects.jsonl", "wds.wids.json"))
    assert "\n" not in message and f"({need} bytes)" in message
    assert f"({limit - usage} bytes)" in message and "in_memory=False" in message
    assert segments(root) == []
    monkeypatch.setattr(memory_limit, "MIN_HEADROOM", 0)  # now it fits
    assert len(PackedDataset(packed["wds"], in_memory=True)) == 24


def test_a_url_is_downloaded_into_ram(uploaded: dict[str, Any], root: Path) -> None:
    pytest.importorskip("s3fs")
    ds = PackedIterableDataset(uploaded["url"], decode="raw", with_keys=True, in_memory=True,
                               partition=PartitionOptions(drop_last=False))
    assert ds.remote is None and ds.path.parent == root  # no disk cache
    disk = PackedDataset(uploaded["local"], decode="raw", with_keys=True)
    assert sorted((key, raw(d)) for d, _, key in ds) == \
        sorted((key, raw(d)) for d, _, key in disk)
    with pytest.raises(ValueError, match="do not apply with in_memory=True"):
        PackedDataset(uploaded["url"], in_memory=True,
                      remote=RemoteOptions(cache_dir=root / "cache"))


def test_refuses_a_copy_over_the_tmpfs_free_space(packed: dict[str, Path], root: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_limit, "tmpfs_free", lambda folder: 1000)
    with pytest.raises(MemoryError, match=r"has only 1000 bytes \(1000 bytes\) free.*shm-size"):
        PackedDataset(packed["npy"], in_memory=True)
    assert segments(root) == []


def test_the_benchmark_measures_and_tabulates(packed: dict[str, Path], root: Path) -> None:
    from devtools.bench.in_memory import markdown, pss_case, run_speed

    ours = pss_case("ours", packed["npy"])
    assert ours["samples"] == 24 and ours["pss"] > 0
    speed = run_speed({"npy": packed["npy"]}, runs=1, passes=1)
    table = markdown(10, {"empty fork": 1, "ours": 2, "naive fork": 3, "empty spawn": 4,
                          "naive spawn": 5}, speed)
    assert "| ours | 0 MiB | 0.10x |" in table and "| npy |" in table
