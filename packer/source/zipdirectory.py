"""List a zip's members from its central directory, one record at a time.

zipfile builds a ZipInfo object per member before the first can be looked at, so its
memory grows with the member count; the scan needs only each member's name,
flags, method, CRC, compressed size and local header offset, so the records are
parsed here with struct, through one buffered reader, and dropped as they are listed.

    ... local headers + data ...
    central directory     one 46-byte record + name + extra + comment per member
    [zip64 end record]    when counts or offsets overflow 16/32 bits
    [zip64 locator]
    end record            "PK\\x05\\x06", in the last 64 KiB + 22 bytes
"""

from __future__ import annotations

import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from packer.errors import SourceError
from packer.source.members import DEFLATED, STORED, Entry

END = struct.Struct("<4s4H2LH")  # signature, disks, counts, directory size and offset
LOCATOR = struct.Struct("<4sLQL")
END64 = struct.Struct("<4sQ2H2L4Q")
RECORD = struct.Struct("<4s4B4HL2L5H2L")
END_SIG, LOCATOR_SIG, END64_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
RECORD_SIG = b"PK\x01\x02"
MAX_COMMENT = 1 << 16
ZIP64_EXTRA = 0x0001
UTF8_FLAG = 0x800


def zip_entries(path: Path) -> Iterator[Entry]:
    """The members of a zip in directory order; one-line SourceError when it is damaged."""
    try:
        with open(path, "rb", buffering=1 << 20) as handle:
            count, offset, shift = _directory(handle)
            handle.seek(offset + shift)
            for _ in range(count):
                yield _record(handle, shift)
    except (OSError, struct.error, ValueError) as exc:
        raise SourceError(f"{path}: not a readable zip ({exc}): truncated or damaged "
                          "(its member list is at the end); re-download or re-create it") from exc


def _directory(handle: BinaryIO) -> tuple[int, int, int]:
    """(members, directory offset, bytes prepended to the zip)."""
    end = handle.seek(0, 2)
    handle.seek(max(0, end - MAX_COMMENT - END.size))
    tail = handle.read()
    at = tail.rfind(END_SIG)
    if at < 0 or len(tail) - at < END.size:
        raise ValueError("no end-of-central-directory record")
    fields = END.unpack_from(tail, at)
    where = end - len(tail) + at
    count, size, offset = fields[4], fields[5], fields[6]
    if (count == 0xFFFF or size == 0xFFFFFFFF or offset == 0xFFFFFFFF) \
            and at >= LOCATOR.size and tail[at - LOCATOR.size :].startswith(LOCATOR_SIG):
        _, _, end64, _ = LOCATOR.unpack_from(tail, at - LOCATOR.size)
        handle.seek(end64)
        record = END64.unpack(handle.read(END64.size))
        if record[0] != END64_SIG:
            raise ValueError("bad zip64 end record")
        count, size, offset = record[7], record[8], record[9]
        where = end64
    shift = where - size - offset  # data prepended to the zip (a self-extractor)
    if shift < 0:
        raise ValueError("the member list lies outside the file")
    return count, offset, shift


def _record(handle: BinaryIO, shift: int) -> Entry:
    fields = RECORD.unpack(handle.read(RECORD.size))
    if fields[0] != RECORD_SIG:
        raise ValueError("bad central directory record")
    flags, method, crc, csize, usize = fields[5], fields[6], fields[9], fields[10], fields[11]
    name_len, extra_len, comment_len = fields[12], fields[13], fields[14]
    attrs, header = fields[17], fields[18]
    raw = handle.read(name_len)
    extra = handle.read(extra_len)
    handle.seek(comment_len, 1)
    name = _member_name(raw, flags)
    csize, header = _zip64(extra, usize, csize, header)
    if name.endswith("/"):
        return Entry(name, "dir")
    if stat.S_ISLNK(attrs >> 16):
        return Entry(name, "a link member: links are not followed in archives")
    if flags & 1:
        return Entry(name, "encrypted: decrypt the archive first")
    if method not in (STORED, DEFLATED):
        return Entry(name, f"compressed with zip method {method}: only stored and deflate "
                           "are read; recompress the zip")
    return Entry(name, "file", header + shift, csize, method, crc)


def _member_name(raw: bytes, flags: int) -> str:
    """A member's name: UTF-8 when the zip says so, and also when it does not but the bytes
    are UTF-8 (Info-ZIP's `zip` stores names as the file system gives them, flag unset,
    and `unzip` extracts them so); cp437, the format's default, otherwise."""
    if not flags & UTF8_FLAG:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("cp437")
    return raw.decode("utf-8")


def _zip64(extra: bytes, usize: int, csize: int, header: int) -> tuple[int, int]:
    """Compressed size and header offset, from the zip64 extra field when they overflow."""
    pos = 0
    while pos + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, pos)
        if kind == ZIP64_EXTRA:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if usize == 0xFFFFFFFF:
                values.pop(0)
            if csize == 0xFFFFFFFF:
                csize = values.pop(0)
            if header == 0xFFFFFFFF:
                header = values.pop(0)
            break
        pos += 4 + length
    return csize, header
