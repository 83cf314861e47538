"""Deterministic tar member headers, built faster than TarInfo.tobuf builds them.

    ustar header, 512 bytes, every member alike except name, size and checksum:
      name[100] mode "0000644" uid "0000000" gid "0000000" size[12] mtime "00000000000"
      chksum "%06o\\0 " typeflag "0" linkname[100] "ustar\\0" "00" uname gname dev* prefix

The bytes are exactly what `tarfile.TarInfo.tobuf(PAX_FORMAT)` makes for a regular file
with mode 0644, uid/gid 0 and mtime 0 (a test compares them); names that are not ASCII
or longer than 100 bytes still go through tarfile, which adds a pax header.
"""

from __future__ import annotations

import tarfile

BLOCK = 512
NAME_BYTES = 100
MAX_SIZE = 8**11 - 1  # what fits the 12-byte octal size field
ZEROS = bytes(BLOCK)

_MODE_IDS = b"0000644\x000000000\x000000000\x00"
_MTIME = b"00000000000\x00"
_TAIL = b"0" + bytes(100) + b"ustar\x0000" + bytes(32 + 32 + 8 + 8 + 155 + 12)
_BASE_SUM = sum(_MODE_IDS) + sum(_MTIME) + sum(b" " * 8) + sum(_TAIL)


def member_header(name: str, size: int) -> bytes:
    """The header of a regular file member `name` holding `size` bytes."""
    if name.isascii() and len(name) <= NAME_BYTES and 0 <= size <= MAX_SIZE:
        raw = name.encode("ascii")
        size_field = b"%011o\x00" % size
        checksum = _BASE_SUM + sum(raw) + sum(size_field)
        return b"".join((raw, ZEROS[: NAME_BYTES - len(raw)], _MODE_IDS, size_field, _MTIME,
                         b"%06o\x00 " % checksum, _TAIL))
    return pax_member_header(name, size)


def pax_member_header(name: str, size: int) -> bytes:
    """tarfile's header, with a pax extension for long or non-ASCII names."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def padding(size: int) -> bytes:
    """Zeros that round `size` bytes up to a whole block."""
    return ZEROS[: -size % BLOCK]
