"""A disk that fills up during a conversion: one clear line, no index.json, resumable.

ENOSPC is injected where each format's bytes leave Python (os.writev for the tar and
HDF5 blob, the npy file object, LMDB's commit, the atomic writer of the index files),
so the test runs anywhere. Where the tests may mount a tmpfs (root), a real small
filesystem fills up as well: that also covers the I/O done in C, and LMDB's habit of
reporting a full disk as EIO.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from click.testing import CliRunner

import packer.storage.files
from devtools.faults.kills import temporary_files, tree
from pack_cli import main
from packer import ConvertOptions, convert
from packer.core.index import INDEX_NAME
from packer.encode import EncodeOptions
from packer.errors import DestinationError, DiskFullError, PackError
from packer.formats import _lmdb_writer, _npy
from packer.formats.base import ShardOptions
from tests.helpers import FORMATS

SHARDS = ShardOptions(max_samples=6)
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def options(fmt: str) -> EncodeOptions | None:
    return EncodeOptions(size=(16, 16)) if fmt == "npy" else None


def run(**changes: Any) -> ConvertOptions:
    return ConvertOptions(**{"shards": SHARDS, "workers": 0, **changes})


class Disk:
    """Free bytes left; a write past them fails with ENOSPC, as a full disk does."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.failures = 0

    def spend(self, size: int) -> None:
        if size > self.free:
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.free -= size


class FullFile:
    """A file object whose writes go through a Disk."""

    def __init__(self, handle: Any, disk: Disk) -> None:
        self._handle = handle
        self._disk = disk

    def write(self, data: Any) -> int:
        self._disk.spend(len(data))
        written: int = self._handle.write(data)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> FullFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


def opener(disk: Disk) -> Any:
    def open_full(*args: Any, **kwargs: Any) -> FullFile:
        return FullFile(builtins.open(*args, **kwargs), disk)
    return open_full


def fill_os_writes(monkeypatch: pytest.MonkeyPatch, disk: Disk) -> None:
    real_writev, real_write, real_pwrite = os.writev, os.write, os.pwrite

    def writev(fd: int, buffers: list[bytes]) -> int:
        disk.spend(sum(len(b) for b in buffers))
        return real_writev(fd, buffers)

    def write(fd: int, data: bytes) -> int:
        disk.spend(len(data))
        return real_write(fd, data)

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        disk.spend(len(data))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "writev", writev)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwrite", pwrite)


class FullEnv:
    """An LMDB environment whose write commits fail once the Disk is spent."""

    def __init__(self, env: Any, disk: Disk) -> None:
        self._env = env
        self._disk = disk

    def begin(self, write: bool = False, **kwargs: Any) -> Any:
        txn = self._env.begin(write=write, **kwargs)
        return FullTxn(txn, self._disk) if write else txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


class FullTxn:
    def __init__(self, txn: Any, disk: Disk) -> None:
        self._txn = txn
        self._disk = disk

    def __enter__(self) -> Any:
        return self._txn.__enter__()

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is None:
            try:
                self._disk.spend(_lmdb_writer.TXN_BYTES)
            except OSError:
                self._txn.abort()
                raise lmdb.Error("mdb_txn_commit: No space left on device") from None
        self._txn.__exit__(kind, exc, tb)


def fill_disk(monkeypatch: pytest.MonkeyPatch, fmt: str, disk: Disk) -> None:
    """Route every write of format `fmt` (and of the index files) through `disk`."""
    monkeypatch.setattr(packer.storage.files, "open", opener(disk), raising=False)
    if fmt in ("wds", "hdf5"):
        fill_os_writes(monkeypatch, disk)
    elif fmt == "npy":
        monkeypatch.setattr(_npy, "open", opener(disk), raising=False)
    else:
        real_open = lmdb.open
        monkeypatch.setattr(_lmdb_writer.lmdb, "open",
                            lambda *a, **k: FullEnv(real_open(*a, **k), disk))


SMALL_TXN = 4096  # several LMDB commits for 40 small images (the layout depends on it)


@pytest.fixture(scope="module")
def references(mixed_src: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Uninterrupted runs; "lmdb-small-txn" with the transaction size the injection uses.
    Each DST is named `out`, as the tests': wds shards carry the name."""
    root = tmp_path_factory.mktemp("disk-ref")
    for fmt in FORMATS:
        convert(mixed_src, root / fmt / "out", fmt, options(fmt), run())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_lmdb_writer, "TXN_BYTES", SMALL_TXN)
        convert(mixed_src, root / "lmdb-small-txn" / "out", "lmdb", run=run())
    return {fmt: root / fmt / "out" for fmt in (*FORMATS, "lmdb-small-txn")}


@pytest.mark.parametrize("free", [0, 9_000, 60_000, 10**9])
def test_disk_full_stops_clearly_and_resumes(mixed_src: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             references: dict[str, Path], fmt: str,
                                             free: int) -> None:
    """Free bytes from none to plenty: the conversion fails where the disk fills."""
    monkeypatch.setattr(_lmdb_writer, "TXN_BYTES", SMALL_TXN)
    reference = references["lmdb-small-txn" if fmt == "lmdb" else fmt]
    dst = tmp_path / "out"
    disk = Disk(free)
    with monkeypatch.context() as patch:
        fill_disk(patch, fmt, disk)
        try:
            convert(mixed_src, dst, fmt, options(fmt), run())
        except DiskFullError as exc:
            message = str(exc)
        else:
            message = ""
    assert disk.failures or free > 9_000, "the injection missed the writes"
    if not disk.failures:  # enough room: an ordinary run
        assert tree(dst) == tree(reference)
        return
    assert message.startswith(f"{dst}: disk full (No space left on device)"), message
    assert "free space" in message and "--resume" in message and "\n" not in message
    assert not (dst / INDEX_NAME).exists()
    convert(mixed_src, dst, fmt, options(fmt), run(resume=True))  # after freeing space
    assert tree(dst) == tree(reference)


def test_disk_full_on_the_command_line(mixed_src: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "out"
    argv = ["convert", str(mixed_src), str(dst), "--to", "wds", "--shard-samples", "6",
            "--workers", "0"]
    with monkeypatch.context() as patch:
        fill_disk(patch, "wds", Disk(60_000))
        result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {dst}: disk full"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert "--resume" in result.stderr
    resumed = CliRunner().invoke(main, [*argv, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert not temporary_files(tree(dst))


def test_disk_full_error_classes() -> None:
    exc = DiskFullError("x")
    assert isinstance(exc, PackError) and isinstance(exc, OSError)
    assert isinstance(exc, DestinationError)


def test_an_unwritable_destination_is_one_line(mixed_src: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(args[0]))

    monkeypatch.setattr(packer.storage.files, "open", denied, raising=False)
    with pytest.raises(DestinationError, match="cannot write") as caught:
        convert(mixed_src, tmp_path / "out", "wds", run=run())
    assert not isinstance(caught.value, DiskFullError)


# ---------------------------------------------------------------- a real, small tmpfs


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs (root only); skips where mounting is not allowed."""
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_real_full_disk(mixed_src: Path, small_tmpfs: Path, references: dict[str, Path],
                          fmt: str) -> None:
    dst = small_tmpfs / "out"
    argv = ["convert", str(mixed_src), str(dst), "--to", fmt, "--workers", "0",
            *(["--shard-samples", "6"] if fmt == "wds" else []),
            *(["--size", "16x16"] if fmt == "npy" else [])]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {dst}: disk full"), result.stderr
    assert result.stderr.count("\n") == 1 and "--resume" in result.stderr
    assert not (dst / INDEX_NAME).exists()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_tmpfs)], check=True)
    resumed = CliRunner().invoke(main, [*argv, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    reference = references[fmt]
    if fmt != "wds":  # no shard options given (wds alone takes them): a CLI run's record
        reference = small_tmpfs.parent / "cli-ref" / "out"
        made = CliRunner().invoke(main, [*argv[:2], str(reference), *argv[3:]])
        assert made.exit_code == 0, made.output
    assert tree(dst) == tree(reference)
