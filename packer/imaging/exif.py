"""Read the orientation of a JPEG from its header bytes, without Pillow (one walker for
pack time and train time; packer.imaging.jpeg asks Pillow only where this cannot tell).

Why: libjpeg-turbo ignores EXIF, so each JPEG needs a cheap "is it rotated?" check;
opening it with Pillow just to ask costs more than a small decode. This walks the marker
segments before the scan and reads tag 0x0112 of IFD0 in the first APP1 "Exif" segment,
the one Pillow's exif_transpose uses. Pillow also takes the orientation from an XMP
packet (another APP1) when EXIF has none, so any other APP1 means "ask Pillow".

    FFD8 | FFxx len(2, BE) payload | ... | FFE1 len "Exif\0\0" TIFF | ... | FFDA scan
    TIFF: "II*\0" or "MM\0*", IFD0 offset(4) -> count(2), entries of 12 bytes:
          tag(2) type(2) count(4) value(4); orientation is a SHORT in the value field
"""

from __future__ import annotations

import struct

ORIENTATION_TAG = 0x0112
EXIF_HEADER = b"Exif\x00\x00"
APP1 = 0xE1
START_OF_SCAN = 0xDA
END_OF_IMAGE = 0xD9
STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
MAX_HEADER_BYTES = 1 << 20
SEGMENT_LENGTH = struct.Struct(">H")
UNKNOWN = 0  # the walker cannot tell: ask Pillow
_MISSING = -1  # an Exif segment without the tag


def exif_orientation(data: bytes | bytearray | memoryview) -> int:
    """Orientation 1..8 of a JPEG: 1 (upright) when there is none.

    0 (UNKNOWN): let Pillow decide: the tag is there but not one plain SHORT, an APP1
    other than the first Exif one may hold it (XMP), or the header is too long to walk.
    """
    end = min(len(data), MAX_HEADER_BYTES)
    position, exif, other_app1 = 2, _MISSING, False
    while position + 4 <= end:
        if data[position] != 0xFF:
            return 1
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in STANDALONE:
            position += 2
            continue
        if marker in (START_OF_SCAN, END_OF_IMAGE):
            return UNKNOWN if other_app1 else 1
        (length,) = SEGMENT_LENGTH.unpack_from(data, position + 2)
        if marker == APP1:
            if data[position + 4 : position + 10] != EXIF_HEADER:
                other_app1 = True
            elif exif == _MISSING:
                exif = _tiff_orientation(bytes(data[position + 10 : position + 2 + length]))
                if exif != _MISSING:
                    return exif
        position += 2 + length
    return UNKNOWN if other_app1 or len(data) > MAX_HEADER_BYTES else 1


def _tiff_orientation(tiff: bytes) -> int:
    """Tag 0x0112 of IFD0 in a TIFF block: _MISSING when absent, UNKNOWN when malformed."""
    if tiff[:4] == b"II*\x00":
        order = "<"
    elif tiff[:4] == b"MM\x00*":
        order = ">"
    else:
        return _MISSING
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (count,) = struct.unpack_from(order + "H", tiff, ifd)
        for entry in range(ifd + 2, ifd + 2 + 12 * count, 12):
            tag, kind, values, value = struct.unpack_from(order + "HHIH", tiff, entry)
            if tag == ORIENTATION_TAG:
                plain = kind == 3 and values == 1 and 1 <= value <= 8
                return value if plain else UNKNOWN
    except struct.error:
        return UNKNOWN
    return _MISSING
