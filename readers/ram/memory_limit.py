"""How much memory a new in-RAM copy may take: the host's, the cgroup's and the tmpfs's.

A container's limit is its cgroup's, not the host's RAM: `free` inside a container
shows the host, and a copy that fits there gets the container OOM-killed. So the room is
the least of

    the host        MemAvailable of /proc/meminfo (counts reclaimable page cache as free)
    the cgroup      cgroup v2 `memory.max` (v1 `memory.limit_in_bytes`) of this process's
                    cgroup and every ancestor visible, less what it uses and cannot
                    reclaim (usage less the page cache, plus tmpfs, which is never reclaimed)

and, separately, the free space of the tmpfs the copy goes to (Docker's /dev/shm is
64 MiB unless the container runs with --shm-size).

The paths are module attributes so that tests can point them at a fake cgroup tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
HEADROOM_FRACTION = 0.1  # of the room, left for the model, the workers and the batches
MIN_HEADROOM = 256 * 2**20
UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1

__all__ = ["Room", "check_fits", "memory_room", "tmpfs_free"]


@dataclass(frozen=True)
class Room:
    """Bytes that may still be taken, and what set that number (for the message)."""

    num_bytes: int
    by: str


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max": no limit


def _stat(path: Path) -> dict[str, int]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split() for line in lines)
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}


def _host_room() -> Room:
    for line in MEMINFO.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return Room(int(line.split()[1]) * 1024, "the host's available memory")
    pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return Room(pages, "the host's free memory")


def _cgroup_dirs() -> list[tuple[Path, str]]:
    """(folder, version) of this process's memory cgroup and its ancestors, innermost first."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    found: list[tuple[Path, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: "0::/path"
            base, version = CGROUP_ROOT, "v2"
        elif "memory" in controllers.split(","):
            base, version = CGROUP_ROOT / "memory", "v1"
        else:
            continue
        parts = Path(path).relative_to("/").parts
        for depth in range(len(parts), -1, -1):  # in a container the tail may be hidden
            folder = base.joinpath(*parts[:depth])
            if folder.is_dir():
                found.append((folder, version))
    return found


def _cgroup_room(folder: Path, version: str) -> Room | None:
    if version == "v2":
        limit, usage = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
        name, stat = "memory.max", _stat(folder / "memory.stat")
        cache = stat.get("file", 0) - stat.get("shmem", 0)
    else:
        limit = _read_int(folder / "memory.limit_in_bytes")
        usage, name = _read_int(folder / "memory.usage_in_bytes"), "memory.limit_in_bytes"
        stat = _stat(folder / "memory.stat")
        cache = stat.get("total_cache", stat.get("cache", 0)) \
            - stat.get("total_shmem", stat.get("shmem", 0))
    if limit is None or limit >= UNLIMITED:
        return None
    used = max(0, (usage or 0) - max(0, cache))
    return Room(max(0, limit - used), f"the cgroup limit ({folder / name} = {limit} bytes, "
                                      f"{used} in use)")


def memory_room() -> Room:
    """The least of the host's available memory and every cgroup limit's remaining room."""
    rooms = [_host_room()]
    rooms += [room for folder, version in _cgroup_dirs()
              if (room := _cgroup_room(folder, version)) is not None]
    return min(rooms, key=lambda room: room.num_bytes)


def tmpfs_free(folder: Path) -> int:
    info = os.statvfs(folder)
    return info.f_bavail * info.f_frsize


def _size(num_bytes: int) -> str:
    value, unit = float(num_bytes), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{num_bytes} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def check_fits(need: int, what: str, folder: Path) -> None:
    """Raise MemoryError, in one line with both numbers, if `need` bytes would not fit."""
    room = memory_room()
    headroom = max(MIN_HEADROOM, int(room.num_bytes * HEADROOM_FRACTION))
    if need + headroom > room.num_bytes:
        raise MemoryError(
            f"in_memory: {what} needs {_size(need)} ({need} bytes) of RAM, but only "
            f"{_size(room.num_bytes)} ({room.num_bytes} bytes) is free by {room.by}, and "
            f"{_size(headroom)} is kept free for training: read it from disk "
            "(in_memory=False) or give the job more memory")
    free = tmpfs_free(folder)
    if need > free:
        raise MemoryError(
            f"in_memory: {what} needs {_size(need)} ({need} bytes), but {folder} has only "
            f"{_size(free)} ({free} bytes) free: enlarge it (docker run --shm-size), set "
            "PACKER_RAM_DIR to a larger tmpfs, or read from disk (in_memory=False)")
