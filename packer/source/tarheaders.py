"""List a plain tar's members fast: 512-byte headers read with pread, no TarInfo objects.

tarfile parses every header field in Python, which costs more than packing the member;
the scan needs only each member's name, type, size and data offset.
ustar, GNU and pax headers are read here, with GNU long names and pax `path`/`size`
records; anything rarer (sparse members, base-256 sizes, global pax headers, a bad
checksum) raises _Unusual and the scan falls back to tarfile, which reads everything
and words its errors. Names decode as tarfile decodes them (UTF-8, surrogateescape).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator

from packer.errors import SourceError
from packer.source.members import Entry

BLOCK = 512
WINDOW = 16 << 10  # tiny members: many headers a read; photos: little read in vain
ADLER = 65521  # the modulus of adler32's sums
SMALL = 4096  # members up to this size are handed out with their header when in the window
ZERO = bytes(BLOCK)
REGULAR = (b"0", b"\0", b"7")  # tarfile's REGULAR_TYPES, less sparse
KNOWN = (*REGULAR, b"1", b"2", b"3", b"4", b"5", b"6")
LINKS = (b"1", b"2")
POSIX, GNU = b"ustar\x0000", b"ustar  \x00"
NAME = ("utf-8", "surrogateescape")
# pax records this reader acts on (path, size) or leaves to tarfile (sparse, charset)
PAX_READ = re.compile(rb" (?:path|size|GNU\.sparse|hdrcharset)")


class _Unusual(Exception):
    """A header this reader leaves to tarfile."""


class _Window:
    """Header blocks read WINDOW bytes at a time: small members share one system call."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.start = 0
        self.data = b""

    def cached(self, offset: int, size: int) -> bytes:
        """A small member's bytes when the window already holds them, else b""."""
        at = offset - self.start
        if size > SMALL or at < 0 or at + size > len(self.data):
            return b""
        return self.data[at : at + size]

    def read(self, offset: int, size: int) -> bytes:
        """`size` bytes at `offset`, from the window when they lie in it (an extended
        header's records follow its header block: no system call of their own)."""
        at = offset - self.start
        if at < 0 or at + size > len(self.data):
            if size > WINDOW:
                return os.pread(self.fd, size, offset)
            self.start, self.data, at = offset, os.pread(self.fd, WINDOW, offset), 0
        return self.data[at : at + size]


def tar_entries(fd: int, where: str, end: int, base: int = 0, folder: str = ""
                ) -> Iterator[Entry]:
    """The members of the tar open at `fd` (`end` bytes), with top-level tars opened
    (a tar within: from `base`, its members' names under `folder`)."""
    offset, last = base, "(none: the first header is damaged)"
    extended: dict[str, str | int] = {}
    window = _Window(fd)
    while offset + BLOCK <= end:
        block = window.read(offset, BLOCK)
        if block == ZERO:
            return
        name, kind, size = _header(block)
        data = offset + BLOCK
        if kind in (b"L", b"K", b"x"):
            if data + size > end:
                raise truncated(where, last, "an extended header ends past the end")
            payload = window.read(data, size)
            if kind == b"L":
                extended["path"] = _text(payload)
            elif kind == b"x" and PAX_READ.search(payload):  # else mtime and such: unread
                extended.update(_pax(payload))
            offset = data + _padded(size)
            continue
        name = str(extended.pop("path", name))
        size = int(extended.pop("size", size))
        extended.clear()
        if kind == b"\0" and name.endswith("/"):
            kind = b"5"
        regular = kind in REGULAR
        if regular and data + size > end:
            raise truncated(where, last, f"member {name!r} ends past the end")
        if not folder and regular and (inner := inner_tar_folder(name)) is not None:
            yield Entry(inner, "dir")  # a top-level NAME.tar is the folder NAME
            yield from tar_entries(fd, f"{where}:{name}", data + size, data, inner + "/")
        else:
            yield tar_entry(folder + name, kind, data, size, window.cached(data, size))
        last = name.rstrip("/")  # as tarfile names folders
        offset = data + _padded(size) if regular or kind not in KNOWN else data
    if offset < end and os.pread(fd, end - offset, offset).strip(b"\0"):
        raise truncated(where, last, "a header is cut short")
    raise truncated(where, last, NO_END)


def inner_tar_folder(name: str) -> str | None:
    """The folder a top-level `NAME.tar` member stands for (`./NAME.tar` too, as
    `tar cf X.tar -C dir .` writes it), or None for any other member."""
    if name.rstrip("/")[-4:].lower() != ".tar":
        return None
    bare = name.strip("/")
    while bare.startswith("./"):
        bare = bare[2:].lstrip("/")
    if "/" in bare or not bare.lower().endswith(".tar") or bare.startswith("."):
        return None
    return bare[: -len(".tar")]


NO_END = "it ends without the zero blocks that end a tar, where the next header would be"


def truncated(where: str, last: str, detail: str) -> SourceError:
    return SourceError(f"{where}: truncated or damaged after member {last!r} ({detail}); "
                       "re-download or re-create the archive")


def tar_entry(name: str, kind: bytes, data: int, size: int, head: bytes = b"") -> Entry:
    """A member of this type byte (what tarfile's `TarInfo.type` holds)."""
    if kind == b"5":
        return Entry(name, "dir")
    if kind in LINKS:
        return Entry(name, "a link member: links are not followed in archives")
    if kind not in REGULAR:
        return Entry(name, "not a regular file")
    return Entry(name, "file", data, size, head=head)


def _header(block: bytes) -> tuple[str, bytes, int]:
    """Name, type and size of a header block; _Unusual for what tarfile should read."""
    field = block[148:156]
    stored = field.split(b"\0", 1)[0].strip()
    try:  # a number field that is not octal: damaged
        # The checksum is the sum of the block's bytes, its own field counted as spaces.
        # adler32's low half is 1 + that sum modulo 65521, in C: the sum checked modulo
        # 65521 (a damaged block that passes must be off by a multiple of it, and parse).
        if not stored or (int(stored, 8) - (zlib.adler32(block) & 0xFFFF) + 1 + sum(field)
                          - 256) % ADLER != 0:
            raise _Unusual("checksum")  # damaged, or signed: let tarfile decide
        if block[124] & 0x80:
            raise _Unusual("base-256 size")
        size = int(block[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError as exc:
        raise _Unusual("number field") from exc
    kind = block[156:157]
    if kind == b"x":  # a pax header: its records matter, not its own name
        return "", kind, size
    name = _text(block[0:100])
    prefix = _text(block[345:500]) if block[345] and block[257:265] in (POSIX, GNU) else ""
    if prefix and (block[257:265] == GNU or kind in (b"L", b"K", b"S")):
        raise _Unusual("GNU prefix field")
    if kind not in KNOWN and kind not in (b"L", b"K", b"x"):
        raise _Unusual(f"type {kind!r}")
    return (f"{prefix}/{name}" if prefix else name), kind, size


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode(*NAME)


def _pax(payload: bytes) -> dict[str, str | int]:
    """The `path` and `size` records of a pax header ("LEN KEY=VALUE\\n" each)."""
    out: dict[str, str | int] = {}
    pos = 0
    try:
        while pos < len(payload) and payload[pos:pos + 1] != b"\0":
            space = payload.index(b" ", pos)
            length = int(payload[pos:space])
            key, _, value = payload[space + 1 : pos + length - 1].partition(b"=")
            pos += length
            if key == b"path":
                out["path"] = value.decode(*NAME)
            elif key == b"size":
                out["size"] = int(value)
            elif key.startswith((b"GNU.sparse", b"hdrcharset")):
                raise _Unusual(key.decode("ascii", "replace"))
    except ValueError as exc:
        raise _Unusual("pax record") from exc
    return out


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK
