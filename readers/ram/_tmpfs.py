"""One folder in a tmpfs per dataset and node, shared by every process that reads it.

    <root>/packer-ram-<uid>-<name>/              the published copy (renamed in whole)
    <root>/packer-ram-<uid>-<name>.lock          mutex: building and removing, briefly
    <root>/packer-ram-<uid>-<name>.users         every user holds a shared flock on it
    <root>/packer-ram-<uid>-<name>.tmp-<pid>-<r>  a copy being built, or being removed

`root` is $PACKER_RAM_DIR, by default /dev/shm. Locks are flocks, which the kernel drops
when a process ends however it ends (SIGKILL too), so nothing needs a pid file:

- attach: under the mutex, take the users lock shared; build the copy under a temporary
  name and rename it into place if it is not there (so no process sees half a copy).
  A forked child inherits the descriptor and with it the lock; a spawned one attaches.
- the last user: the creator starts a watcher (this file run as a script: stdlib only,
  no torch) that waits for the users lock exclusively, i.e. until every user has ended,
  then removes the copy and the lock files under the mutex (unless a user came back).
- a dead watcher (SIGKILL): the next attach on the node sweeps every segment nobody uses
  and every temporary folder whose builder is gone (its mutex is free).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

PREFIX = "packer-ram-"
DEFAULT_ROOT = "/dev/shm"


def ram_root() -> Path:
    return Path(os.environ.get("PACKER_RAM_DIR", DEFAULT_ROOT))


def _prefix() -> str:
    return f"{PREFIX}{os.getuid()}-"


class Paths:
    """The names of one segment."""

    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.folder = root / f"{_prefix()}{name}"
        self.mutex = root / f"{self.folder.name}.lock"
        self.users = root / f"{self.folder.name}.users"

    def temporary(self) -> Path:
        return self.folder.with_name(f"{self.folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def temporaries(self) -> list[Path]:
        return list(self.folder.parent.glob(f"{self.folder.name}.tmp-*"))


def _lock_mutex(path: Path) -> int:
    """The mutex file's descriptor, locked (waits for it)."""
    fd = _try_mutex(path, wait=True)
    while fd is None:  # not reached: a waiting lock is always won
        fd = _try_mutex(path, wait=True)
    return fd


def _try_mutex(path: Path, wait: bool = False) -> int | None:
    """The mutex file's descriptor, locked; None if busy and not `wait`.

    The file is unlinked by whoever removes the segment, so a lock won on an unlinked
    file is worthless: check that the path still names the locked file, else retry.
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _unused(users: int) -> bool:
    """Whether nobody holds the users lock (taken exclusively, then let go)."""
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(users, fcntl.LOCK_UN)
    return True


def _remove(paths: Paths) -> None:
    """Remove the copy and its lock files; the caller holds the mutex and knows it unused.

    Renamed first, so a removal cut short never leaves a partial copy under the real name.
    """
    for stale in paths.temporaries():
        shutil.rmtree(stale, ignore_errors=True)
    if paths.folder.exists():
        doomed = paths.temporary()
        os.rename(paths.folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    paths.users.unlink(missing_ok=True)
    paths.mutex.unlink(missing_ok=True)


def attach(paths: Paths, build: Callable[[Path], None]) -> int:
    """Become a user of the segment, building it first if missing; returns the users fd.

    `build(folder)` fills a new folder; it runs under the mutex, so other processes wait
    for the copy instead of making their own.
    """
    paths.folder.parent.mkdir(parents=True, exist_ok=True)
    sweep(paths.folder.parent, keep=paths.name)
    mutex = _lock_mutex(paths.mutex)
    users = os.open(paths.users, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        watched = paths.folder.is_dir() and not _unused(users)
        fcntl.flock(users, fcntl.LOCK_SH)
        if not paths.folder.is_dir():
            for stale in paths.temporaries():  # builders that died: we hold their mutex
                shutil.rmtree(stale, ignore_errors=True)
            staging = paths.temporary()
            try:
                staging.mkdir(mode=0o700)  # the user's, as the name says
                build(staging)
                os.rename(staging, paths.folder)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        if not watched:  # new, or left behind by a watcher that was killed
            _start_watcher(paths)
    except BaseException:
        os.close(users)
        raise
    finally:
        os.close(mutex)
    return users


def detach(users: int) -> None:
    """Stop being a user (the watcher removes the copy once nobody is)."""
    with contextlib.suppress(OSError):
        os.close(users)


def _start_watcher(paths: Paths) -> None:
    """Run this file as a script that outlives us; it detaches itself (see `_watch_main`)."""
    command = [sys.executable, "-I", "-S", str(Path(__file__).resolve()),
               str(paths.folder.parent), paths.name]
    subprocess.run(command, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   start_new_session=True, timeout=60)


def watch(paths: Paths, users: int) -> None:
    """Wait until nobody uses the segment, then remove it (unless a user came back)."""
    while True:
        fcntl.flock(users, fcntl.LOCK_EX)  # granted once every user has ended
        fcntl.flock(users, fcntl.LOCK_UN)  # attach takes the mutex first: let go, then ask
        mutex = _lock_mutex(paths.mutex)
        try:
            try:
                current = os.stat(paths.users).st_ino == os.fstat(users).st_ino
            except FileNotFoundError:
                current = False
            if not current:  # removed by a sweep, perhaps made anew: not ours any more
                return
            if _unused(users):
                _remove(paths)
                return
        finally:
            os.close(mutex)


def sweep(root: Path, keep: str | None = None) -> list[str]:
    """Remove the segments nobody uses and the half-built copies of dead builders.

    Skips a segment whose mutex is held (being built or removed now). Returns the names
    removed.
    """
    removed = []
    prefix = _prefix()
    names = {path.name[len(prefix):].split(".", 1)[0] for path in root.glob(f"{prefix}*")}
    for name in sorted(names - {keep}):
        paths = Paths(root, name)
        mutex = _try_mutex(paths.mutex)
        if mutex is None:
            continue
        try:
            users = os.open(paths.users, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                if _unused(users):
                    _remove(paths)
                    removed.append(name)
            finally:
                os.close(users)
        finally:
            os.close(mutex)
    return removed


def _watch_main(root: str, name: str) -> None:
    """The watcher's entry (in a session of its own): open the users file, fork, watch."""
    paths = Paths(Path(root), name)
    users = os.open(paths.users, os.O_RDWR | os.O_CLOEXEC)
    if os.fork() != 0:
        os._exit(0)  # the caller waits for this exit only; the child watches on
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    watch(paths, users)


if __name__ == "__main__":
    _watch_main(sys.argv[1], sys.argv[2])
