"""A JPEG's frame header (the SOFn segment), read in pure Python, and the one verdict
that guards every native decode: may libjpeg-turbo's fast paths see this stream?

    SOI  FFD8
    ...  FFxx LLLL <L-2 bytes>   APPn, COM, DQT, DHT, DRI, ...: skipped by their lengths
    SOFn FFCn LLLL P HHHH WWWW N (id, HV, Tq) x N
    SOS  FFDA ...                 entropy-coded data follows; a frame must come before

Why: simplejpeg and the compiled crop decode (the `_cropjpeg` extension) drive libjpeg
with DCT scaling, cropping and skipped rows, paths that are sound for ordinary
photographs and not for every stream libjpeg-turbo accepts (a lossless stream decoded
with min_height kills the process). So a native decoder sees only what `native` accepts
(`native_refusal` words the same verdict): baseline, extended or progressive
Huffman-coded (SOF0, SOF1, SOF2), 8-bit, gray or three components with the sampling of
ordinary cameras. Everything else (lossless, arithmetic-coded, 12/16-bit, hierarchical,
CMYK, unusual sampling, a header that does not parse) goes to Pillow, which decodes it or
gives the reason it cannot.

The walk costs a few struct unpacks on the first bytes (segments are skipped, never read)
and never raises: any garbage, any truncation, is just "no frame".

The same header holds the orientation (`exif_orientation`): libjpeg-turbo ignores EXIF,
so each JPEG needs a cheap "is it rotated?" check, and opening it with Pillow just to ask
costs more than a small decode. That walk reads tag 0x0112 of IFD0 in the first APP1
"Exif" segment, the one Pillow's exif_transpose uses. Pillow also takes the orientation
from an XMP packet (another APP1) when EXIF has none, so any other APP1 means "ask Pillow"
(the JPEG fast path asks it only where this walk cannot tell).

    FFE1 len "Exif\0\0" TIFF: "II*\0" or "MM\0*", IFD0 offset(4) -> count(2), entries of
    12 bytes: tag(2) type(2) count(4) value(4); orientation is a SHORT in the value field
"""

from __future__ import annotations

import struct
from typing import NamedTuple

Buffer = bytes | bytearray | memoryview

SOF_KINDS = {
    0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive", 0xC3: "lossless",
    0xC5: "hierarchical sequential", 0xC6: "hierarchical progressive",
    0xC7: "hierarchical lossless", 0xC9: "arithmetic-coded extended",
    0xCA: "arithmetic-coded progressive", 0xCB: "arithmetic-coded lossless",
    0xCD: "hierarchical arithmetic-coded sequential",
    0xCE: "hierarchical arithmetic-coded progressive",
    0xCF: "hierarchical arithmetic-coded lossless", 0xF7: "JPEG-LS",
}
NATIVE_SOF = frozenset({0xC0, 0xC1, 0xC2})
LOSSLESS_SOF = frozenset({0xC3, 0xC7, 0xCB, 0xCF})
STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RST0-7: no length follows
DHP = 0xDE  # define hierarchical progression: the stream is hierarchical
SOS, EOI, SOI_MARKER = 0xDA, 0xD9, 0xD8
LENGTH = struct.Struct(">H")
FRAME_START = struct.Struct(">BHHB")  # precision, height, width, number of components
MAX_SEGMENTS = 4096  # a header has tens; a bound keeps a crafted stream from looping long
# (H, V) of the luma component for 4:4:4, 4:2:2, 4:4:0, 4:2:0 (chroma 1x1); gray: any of them
NATIVE_SAMPLING = frozenset({(1, 1), (2, 1), (1, 2), (2, 2)})
NATIVE_FACTORS = frozenset(  # the sampling bytes (HV) of each component, as the frame has them
    [bytes([h << 4 | v]) for h, v in NATIVE_SAMPLING]
    + [bytes([h << 4 | v, 0x11, 0x11]) for h, v in NATIVE_SAMPLING])


class Frame(NamedTuple):
    """The frame header of a JPEG: its SOFn marker byte and what the segment says."""

    sof: int
    precision: int
    height: int
    width: int
    sampling: tuple[tuple[int, int], ...]  # (H, V) of each component
    hierarchical: bool

    @property
    def kind(self) -> str:
        """Baseline, progressive, lossless, ... as T.81 names the SOFn marker."""
        name = SOF_KINDS.get(self.sof, f"SOF marker 0x{self.sof:02X}")
        return f"hierarchical {name}" if self.hierarchical and "hier" not in name else name

    @property
    def dct_scalable(self) -> bool:
        """Whether libjpeg may scale it in the DCT domain (Pillow's draft): DCT-based."""
        return self.sof not in LOSSLESS_SOF and not self.hierarchical


def read_frame(data: Buffer) -> Frame | None:
    """The first frame header of a JPEG; None if `data` is not a JPEG or its header does not
    parse (truncated, garbage where a marker belongs, a scan before any frame)."""
    found = _locate(data)
    if found is None:
        return None
    marker, body, hierarchical = found
    precision, height, width, _ = FRAME_START.unpack_from(body)
    factors = body[7::3]
    sampling = tuple([(f >> 4, f & 0x0F) for f in factors])
    return Frame(marker, precision, height, width, sampling, hierarchical)


def _locate(data: Buffer) -> tuple[int, Buffer, bool] | None:
    """(SOFn marker byte, the segment's body after its length, whether a DHP came first)
    of a frame header that T.81 B.2.2 allows; None if there is none."""
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        data = data.cast("B") if data.c_contiguous else data.tobytes()
    try:
        found = _walk(data)
    except (struct.error, ValueError, TypeError, IndexError):
        return None
    if found is None:
        return None
    body = found[1]
    if len(body) < 9 or len(body) != 6 + 3 * body[5] or not (body[1] or body[2]) or not (
            body[3] or body[4]):
        return None  # height 0 defers to a DNL segment, which libjpeg does not support
    if not all(0x11 <= f <= 0x44 and 1 <= f & 0x0F <= 4 for f in body[7::3]):
        return None
    return found


def _walk(data: Buffer) -> tuple[int, Buffer, bool] | None:
    if data[:2] != b"\xff\xd8":
        return None
    position, hierarchical = 2, False
    for _ in range(MAX_SEGMENTS):
        while data[position] == 0xFF and data[position + 1] == 0xFF:
            position += 1  # fill bytes before a marker
        if data[position] != 0xFF:
            return None  # garbage where a marker belongs
        marker = data[position + 1]
        position += 2
        if marker in STANDALONE:
            continue
        if marker in (SOS, EOI, SOI_MARKER, 0x00):
            return None
        (length,) = LENGTH.unpack_from(data, position)
        if length < 2 or position + length > len(data):
            return None
        if marker in SOF_KINDS:
            return marker, data[position + 2 : position + length], hierarchical
        hierarchical = hierarchical or marker == DHP
        position += length
    return None


def native_refusal(data: Buffer) -> str | None:
    """None if the native fast paths may decode `data`; else why not, in a few words."""
    frame = read_frame(data)
    if frame is None:
        return "no readable JPEG frame header"
    if frame.sof not in NATIVE_SOF or frame.hierarchical:
        return f"{frame.kind} JPEG"
    if frame.precision != 8:
        return f"{frame.precision}-bit JPEG"
    if len(frame.sampling) not in (1, 3):
        return f"JPEG of {len(frame.sampling)} components"
    luma, *chroma = frame.sampling
    if luma not in NATIVE_SAMPLING or any(factors != (1, 1) for factors in chroma):
        return "JPEG with sampling factors " + ",".join(f"{h}x{v}" for h, v in frame.sampling)
    return None


def native(data: Buffer) -> bool:
    """Whether libjpeg-turbo's fast paths may decode `data` (native_refusal is None),
    decided from the frame's bytes: this runs before every native decode."""
    found = _locate(data)
    if found is None:
        return False
    marker, body, hierarchical = found
    return (marker in NATIVE_SOF and not hierarchical and body[0] == 8
            and bytes(body[7::3]) in NATIVE_FACTORS)


ORIENTATION_TAG = 0x0112
EXIF_HEADER = b"Exif\x00\x00"
APP1 = 0xE1
MAX_HEADER_BYTES = 1 << 20
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
        if marker in (SOS, EOI):
            return UNKNOWN if other_app1 else 1
        (length,) = LENGTH.unpack_from(data, position + 2)
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
