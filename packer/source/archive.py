"""An archive as the source, read in place: .tar, a tar of tars (ImageNet), .zip.

The archive is read as the folder it extracts to (a top-level `n01440764.tar` in a tar
is the folder `n01440764`), so it converts to the same samples, bytes and index. One
pass over the member headers, or a zip's central directory, fills the scan's compact
storage and a member table of offsets (`MemberTable`): items are read later by offset,
in any order, on any thread.

A member is a reject naming `ARCHIVE:MEMBER` when its path escapes the archive, it is
a link, a device or an encrypted or unsupported zip member, or its name repeats
another's; a truncated archive is fatal, naming the last good member. A .tar.gz cannot
seek: tarfile streams it once for the listing (at uncompressed offsets), and a
`GzipCursor` reads the members in one forward pass. bzip2 and xz tars are refused.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from packer.core.record import Reject
from packer.errors import SourceError
from packer.source.archive_sidecars import Sidecars
from packer.source.fields import FieldChoice
from packer.source.items import ItemsBuilder, SourceItems, Strings, Suffixes
from packer.source.kinds import Source, archive_kind, image_name
from packer.source.members import (
    ArchiveSource,
    ArchiveStat,
    Columns,
    Entry,
    MemberTable,
    member_reader,
    not_utf8,
    stat_archive,
)
from packer.source.no_images import other_members
from packer.source.tarheaders import (
    BLOCK,
    NO_END,
    ZERO,
    _Unusual,
    inner_tar_folder,
    tar_entries,
    tar_entry,
    truncated,
)
from packer.source.zipdirectory import zip_entries


def scan_archive(path: Path, choice: FieldChoice) -> Source:
    """Items, class names, rejects, ignored count, reader and sidecar fields of an archive."""
    kind = checked_kind(path)
    before = stat_archive(path)
    listing = list_members(path, kind, before, lambda: _Listing(f"{path}:"))
    return listing.build(path, kind, before, choice)


def checked_kind(path: Path) -> str:
    """"tar", "tgz" or "zip" (a gzipped tar by any name is "tgz"); other compressions
    are refused with how to decompress them."""
    kind = archive_kind(path)
    if kind == "compressed tar":
        raise SourceError(f"{path}: only gzip-compressed tars are read; decompress it once "
                          "(bunzip2 -k, xz -dk) and pass the .tar")
    if kind == "tar":
        with open(path, "rb") as handle:
            if handle.read(2) == b"\x1f\x8b":  # gzip's magic number
                return "tgz"
    if kind is None:
        raise SourceError(f"{path}: not a .tar, .tar.gz, .tgz or .zip archive")
    return kind


class Sink(Protocol):
    """What takes the members of an archive as they are listed."""

    def add(self, entry: Entry) -> None: ...


S = TypeVar("S", bound=Sink)


def list_members(path: Path, kind: str, before: ArchiveStat, make: Callable[[], S]) -> S:
    """Every member into a fresh `make()`; a tar by its headers, or by tarfile (into
    another fresh one) when they hold something rare or it is compressed."""
    if kind == "tar":
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return _filled(make(), tar_entries(fd, str(path), before.size))
            finally:
                os.close(fd)
        except _Unusual:
            pass  # tarfile reads it below
        except OSError as exc:
            raise SourceError(f"{path}: cannot read the archive ({exc.strerror or exc})") \
                from exc
    if kind == "zip":
        return _filled(make(), zip_entries(path))
    if kind == "tar":
        return _filled(make(), _tar_entries(path, before.size, "r:"))
    return _filled(make(), _tar_entries(path, None, "r|gz"))


def _filled(sink: S, entries: Iterator[Entry]) -> S:
    for entry in entries:
        sink.add(entry)
    return sink


def clean_name(name: str) -> str | None:
    """A member path made relative and `/`-separated; None when it escapes the archive."""
    if not name.startswith(("/", ".")) and "//" not in name and "/." not in name:
        return name.rstrip("/")  # no `..`, `.` or empty part: the common case, kept cheap
    parts = name.split("/")  # a backslash is a character of a posix file name
    if name.startswith("/") or ".." in parts:
        return None
    return "/".join(part for part in parts if part not in ("", "."))


def _tar_entries(path: Path, end: int | None, mode: str) -> Iterator[Entry]:
    """The members of a tar, and of the tars at its top level, in archive order.

    `mode` "r|gz" streams a .tar.gz (offsets are then uncompressed offsets); `end`,
    the file's size, catches a plain tar cut inside a member's data."""
    last = "(none: the first header is damaged)"
    try:
        with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
            for member in _members(tar):
                if end is not None and member.isfile() and member.offset_data + member.size > end:
                    raise tarfile.ReadError(f"member {member.name!r} ends past the end")
                if member.isfile() and inner_tar_folder(member.name) is not None:
                    yield from _inner_tar(path, tar, member, mode[:2])
                else:
                    yield _tar_entry(member, 0, member.name)
                last = member.name
            if end is not None and not _zero_block_at(path, tar.offset):
                raise tarfile.ReadError(NO_END)
    except (tarfile.ReadError, EOFError, OSError, zlib.error) as exc:  # OSError: bad gzip
        raise truncated(str(path), last, str(exc)) from exc


def _zero_block_at(path: Path, offset: int) -> bool:
    """Whether the zero block that ends a tar lies at `offset` of `path`."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(BLOCK) == ZERO


def _inner_tar(path: Path, tar: tarfile.TarFile, member: tarfile.TarInfo,
               mode: str) -> Iterator[Entry]:
    """A top-level `NAME.tar` is the folder NAME: its members, offsets in the outer file."""
    folder = str(inner_tar_folder(member.name))
    yield Entry(folder, "dir")
    handle = tar.extractfile(member)
    if handle is None:
        return
    try:
        with tarfile.open(fileobj=handle, mode=mode) as inner:  # type: ignore[call-overload]
            for sub in _members(inner):
                yield _tar_entry(sub, member.offset_data, f"{folder}/{sub.name}")
    except (tarfile.ReadError, EOFError) as exc:
        raise SourceError(f"{path}:{member.name}: truncated or damaged inner tar ({exc}); "
                          "re-download or re-create the archive") from exc


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members in archive order, dropping the headers tarfile keeps in its (untyped)
    `members` list: memory stays flat."""
    while (member := tar.next()) is not None:
        vars(tar)["members"].clear()
        yield member


def _tar_entry(member: tarfile.TarInfo, base: int, name: str) -> Entry:
    if member.issparse():
        return Entry(name, "a sparse member: extract the archive to read it")
    return tar_entry(name, member.type, base + member.offset_data, member.size)


class _Listing:
    """Members sorted into classes, items, ignored entries and rejects (see scan_folder)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.found = ItemsBuilder(prefix, errors="strict")
        self.classes: dict[str, int] = {}  # name -> provisional label, first seen first
        self.ignored: set[str] = set()  # top-level non-folders, hidden folders, other files
        self.rejects: list[Reject] = []
        self.columns = Columns()
        self.sidecars = Sidecars()

    def add(self, entry: Entry) -> None:
        name = clean_name(entry.name)
        if name is None:
            self.rejects.append(Reject(-1, self.prefix + entry.name,
                                       "path escapes the archive (`..` or absolute); skipped"))
            return
        parts = name.split("/")
        if not name or (len(parts) == 1 and entry.kind != "dir") or parts[0].startswith("."):
            if name:
                self.ignored.add(parts[0])  # a top-level file, a hidden top-level folder
            return
        label = self.classes.setdefault(parts[0], len(self.classes))
        folders = len(parts) if entry.kind == "dir" else len(parts) - 1
        hidden = next((d for d in range(1, folders) if parts[d].startswith(".")), None)
        if hidden is not None:
            self.ignored.add("/".join(parts[: hidden + 1]))  # counted once, not entered
        elif entry.kind != "dir":
            self._add_file(name, entry, label)

    def _add_file(self, name: str, entry: Entry, label: int) -> None:
        if not image_name(name.rsplit("/", 1)[-1]):
            if not self.sidecars.offer(name, entry):
                self.ignored.add(name)
            return
        if entry.kind != "file":
            self.rejects.append(Reject(-1, self.prefix + name, f"skipped: {entry.kind}"))
            return
        dot = name.rfind(".")
        try:
            self.found.add_file(name[:dot], name[dot:], label)  # a suffix, not the path
        except UnicodeEncodeError:
            self.rejects.append(not_utf8(self.prefix, name))
            return
        self.columns.append(entry)

    def build(self, path: Path, kind: str, before: ArchiveStat, choice: FieldChoice
              ) -> Source:
        """Sort the items, label classes in name order, identify the archive, read sidecars."""
        names = tuple(sorted(self.classes))
        if not names:
            raise SourceError(f"{path}: no top-level class folders in the archive "
                              f"({other_members(self.ignored)}); lay it out as <class>/<image> (or "
                              "<class>.tar files in a tar), or as webdataset samples "
                              "(KEY.jpg beside KEY.cls)")
        built = self.found.build(self.rejects)
        if not len(built) and not self.rejects:  # an empty dataset would block the retry
            raise SourceError(f"{path}: no images found in {len(names)} top-level folder"
                              f"{'s' * (len(names) != 1)} ({other_members(self.ignored)}); lay "
                              "images out as <class>/<image> with an image extension")
        remap = np.zeros(max(len(self.classes), 1), np.int32)
        for label, name in enumerate(names):
            remap[self.classes[name]] = label
        labels = remap[built.labels]
        origin = member_origin(path, kind, before, built, labels,
                               self.columns.table(self.found.order))
        # --no-fields: the sidecars are ignored files, as in a folder
        used = self.sidecars.used(built) if choice.enabled else set()
        fields = self.sidecars.fields(used, choice, str(path))
        records = self.sidecars.records(origin, built, used, fields, self.rejects) \
            if fields else None
        items = SourceItems(built.prefix, built.keys, built.tails, labels, origin,
                            fields=records)
        self.rejects.sort(key=lambda reject: reject.path)
        ignored = len(self.ignored) + len(self.sidecars.entries) - len(used)
        return Source(path, items, names, self.rejects, ignored, archive=origin, fields=fields)


def member_origin(path: Path, kind: str, before: ArchiveStat, built: SourceItems,
                  labels: npt.NDArray[np.int32], table: MemberTable) -> ArchiveSource:
    """The reader of the items' members, once the archive is known unchanged; its
    fingerprint also covers the items' keys, extensions and labels."""
    parts = [built.keys.data]
    if isinstance(built.tails, Strings):
        parts.append(built.tails.data)
    elif isinstance(built.tails, Suffixes):  # each member's extension
        parts.append("\0".join(built.tails.names).encode("utf-8", "surrogateescape"))
        parts.append(np.ascontiguousarray(built.tails.ids).tobytes())
    parts.append(labels.astype(np.int32).tobytes())
    return member_reader(path, kind, before, table, "archive", parts)
