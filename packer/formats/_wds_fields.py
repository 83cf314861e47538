"""wds fields: one tar member per present field, after the sample's `.cls` member.

    <key>.<image ext>   <key>.cls   <key>.<member>   <key>.<member> ...   (next sample)

    field type   member name                stock `webdataset.WebDataset(url).decode()`
    str          <key>.<name>.txt           str
    int          <key>.<name>.id            int
    float        <key>.<name>.json          float (repr text; json reads it back bit-exact)
    json         <key>.<name>.json          the parsed JSON (list, dict, number, ...)
    bytes        <key>.<name>.bin           bytes (no decoder claims .bin)
    floats, ints <key>.<name>.npy           numpy array (float32, int64)

A field named like its extension keeps the plain webdataset name: a `txt` str field
is `<key>.txt`, a `json` json field `<key>.json` (the sidecar names of image folders
and of img2dataset). A sample without a value for a field has no member for it. The
member bytes are the field's byte form (`encode_value`), so the digest of the
fields record covers exactly what the shard holds. The per-sample field table
(fields.npy) records the byte span of a sample's field members, which the reader
walks header by header (`walked`, in a shard's map; `span_values` for anything else).
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from packer.core.fields import FieldSpec, FieldType, unpack_record
from packer.errors import CorruptDatasetError
from packer.formats._tar import BLOCK, member_header, padding

EXTENSIONS: dict[FieldType, str] = {"str": "txt", "int": "id", "float": "json",
                                    "json": "json", "bytes": "bin", "floats": "npy",
                                    "ints": "npy"}
# The header fields `walked` reads, in one call: the name, the size's 11 octal digits
# and the byte that ends them, the type flag.
_HEADER = struct.Struct("100s24x11sB20xB")


def member_suffix(spec: FieldSpec) -> str:
    """What follows `<key>.` in the member name of a field."""
    ext = EXTENSIONS[spec.type]
    return ext if spec.name == ext else f"{spec.name}.{ext}"


def field_members(name: str, specs: Sequence[FieldSpec], record: bytes) -> list[bytes]:
    """The tar pieces (header, bytes, padding) of a sample's present fields."""
    pieces: list[bytes] = []
    for spec, value in zip(specs, unpack_record(record, len(specs)), strict=True):
        if value is not None:
            pieces += (member_header(f"{name}.{member_suffix(spec)}", len(value)), value,
                       padding(len(value)))
    return pieces


def walked(span: bytes | mmap.mmap, at: int, end: int, by_suffix: dict[bytes, int],
           count: int) -> list[bytes | None] | None:
    """The values in span[at:end] (a shard's map, or bytes), walked in place with one
    copy per value, or None where anything is unusual: a pax header, a size field that
    is not 11 octal digits and a NUL or space, a name without a field suffix, a member
    cut short.

    None sends the span to `span_values`, which then gives its values or its error:
    what this returns is exactly what span_values would (the same size parse and name
    split, the header read in one struct unpack), so this fast path can change no
    result and no error. `by_suffix` is `suffixes(specs)`; nothing outside span[at:end]
    is read (a map is read only within the bounds its shard was checked against).
    """
    values: list[bytes | None] = [None] * count
    unpack = _HEADER.unpack_from
    while at + BLOCK <= end:
        name, digits, size_end, flag = unpack(span, at)
        if flag == 0x78 or size_end not in (0, 0x20):  # "x": a pax header
            return None
        try:  # int() strips what span_values strips (spaces), and refuses a NUL
            size = int(digits, 8)
        except ValueError:
            return None
        start = at + BLOCK
        if size < 0 or start + size > end:
            return None
        number = by_suffix.get(name.partition(b"\0")[0].rpartition(b"/")[2].partition(b".")[2])
        if number is None:
            return None
        values[number] = span[start : start + size]
        at = start + size + (-size % BLOCK)
    return values


def span_values(span: bytes, specs: Sequence[FieldSpec],
                where: str | Path) -> list[bytes | None]:
    """The field values in a span of field members (None for a field without a member),
    pax headers applied; `where` names the shard in an error."""
    by_suffix = suffixes(tuple(specs))
    values: list[bytes | None] = [None] * len(specs)
    for member, data in _members(span, where):
        number = by_suffix.get(member.partition(".")[2].encode("utf-8"))
        if number is None:
            raise CorruptDatasetError(f"{where}: unexpected member {member!r} among the "
                                      "fields; the shard is damaged, reconvert")
        values[number] = data
    return values


@functools.lru_cache(maxsize=64)
def suffixes(specs: tuple[FieldSpec, ...]) -> dict[bytes, int]:
    """{member suffix: position} of a dataset's fields (the same for every sample)."""
    return {member_suffix(spec).encode("utf-8"): n for n, spec in enumerate(specs)}


def _size(field: bytes, where: str | Path) -> int:
    """A header's size field (octal, ended by NUL or space; a negative one would walk
    the span backwards, forever)."""
    try:
        size = int(field.rstrip(b"\0 ") or b"0", 8)
    except ValueError as exc:
        raise _damaged(where) from exc
    if size < 0:
        raise _damaged(where)
    return size


def _damaged(where: str | Path) -> CorruptDatasetError:
    return CorruptDatasetError(f"{where}: a damaged tar header among the fields; reconvert")


def _members(span: bytes, where: str | Path) -> Iterator[tuple[str, bytes]]:
    """(base name, bytes) of each regular member in `span`, pax headers applied; a name
    ends at its first NUL, as tarfile reads it."""
    at = 0
    long_name: str | None = None
    while at + BLOCK <= len(span):
        header = span[at : at + BLOCK]
        size = _size(header[124:136], where)
        data = span[at + BLOCK : at + BLOCK + size]
        if len(data) != size:
            raise CorruptDatasetError(f"{where}: a field member is truncated; reconvert")
        at += BLOCK + size + (-size % BLOCK)
        if header[156:157] == b"x":  # pax: the next member's long or non-ASCII name
            try:
                long_name = _pax_path(data)
            except ValueError as exc:  # a record's length or its UTF-8
                raise _damaged(where) from exc
            continue
        name = long_name or header[:100].partition(b"\0")[0].decode("utf-8", "replace")
        long_name = None
        yield name.rsplit("/", 1)[-1], data


def _pax_path(data: bytes) -> str | None:
    """The `path` record of a pax extended header ("<length> path=<name>\\n" records)."""
    at = 0
    while at < len(data):
        length_text, _, _ = data[at:].partition(b" ")
        length = int(length_text)
        if length <= 0:
            raise ValueError(f"a pax record of length {length}")
        record = data[at + len(length_text) + 1 : at + length - 1]
        keyword, _, value = record.partition(b"=")
        if keyword == b"path":
            return value.decode("utf-8")
        at += length
    return None
