"""The one libjpeg-turbo (simplejpeg) fast path, for pack time and train time alike;
Pillow stays the judge of odd files.

Why: nearly every input is a JPEG, and simplejpeg decodes one faster than Pillow (no
Python marker parsing, no chunked feeding), scales in the DCT domain, releases the GIL
while it does, and hands back a buffer that Pillow or torch wrap without a copy. Whenever
it declines (not a JPEG, CMYK/YCCK or RGB colour, an EXIF or XMP orientation other than
upright, too many pixels, any libjpeg warning), the caller falls back to Pillow, which
gives the verdict and the worded reason; so on unusual files the behaviour is exactly
Pillow's. Before libjpeg sees a stream at all, every native call here checks its frame
header (baseline, extended or progressive Huffman-coded, 8-bit, ordinary sampling), so
lossless, arithmetic-coded, 12/16-bit and hierarchical streams, or a header that does not
parse, go to Pillow without touching the fast path. `fast_size` is the one decision; how
far to scale is the caller's (pack: `load_rgb_fast`; train-time decode: powers of two
kept OVERSAMPLE x the target).

`decode_box` decodes only a crop (train-time crops) through the optional compiled
extension `_cropjpeg` (libjpeg-turbo's jpeg_skip_scanlines / jpeg_crop_scanline, built by
`pip install` where a C compiler and jpeglib.h exist; `crop_extension.status()` says
whether it runs here and why): the same pixels as the full decode cut to the box, without
the inverse DCT and colour conversion outside it. Every row is still entropy-decoded
(those below the box too), so damaged data anywhere fails, or goes to Pillow, whichever
box an epoch draws, as with the full decode. Without the extension it is that full
decode, cut.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import simplejpeg
from PIL import Image

from packer.imaging.crop_extension import extension
from packer.imaging.jpeg_frame import UNKNOWN, exif_orientation, native
from packer.imaging.pillow import OVERSAMPLE, Fit, open_image, target_scale

Buffer = bytes | bytearray | memoryview
EOI = b"\xff\xd9"
FAST_COLORSPACES = frozenset({"YCbCr", "Gray"})
ORIENTATION = 0x0112
# Only power-of-two DCT scales are fast in libjpeg-turbo (5/8 or 7/8 decode slower than
# the full image), coarsest first; none between 1/2 and 1.
DCT_FACTORS = (8, 4, 2)
MIN_DCT_FACTOR = 2.0


class Header(NamedTuple):
    height: int
    width: int
    colorspace: str


def header(data: Buffer) -> Header | None:
    """A JPEG's size and colour from its header, if the fast path may decode it and it is
    small enough, else None."""
    if not native(data):
        return None
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except Exception:  # any refusal: Pillow will word it
        return None
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        return None  # Pillow raises the decompression-bomb error
    return Header(int(height), int(width), str(colorspace))


def upright(data: Buffer) -> bool:
    """Whether the image needs no rotation: the header walk, or Pillow where it cannot tell."""
    orientation = exif_orientation(data)
    if orientation != UNKNOWN:
        return orientation == 1
    try:
        return int(open_image(bytes(data)).getexif().get(ORIENTATION, 1)) == 1
    except Exception:
        return False


def fast_size(data: Buffer) -> tuple[int, int] | None:
    """(height, width) of a JPEG that libjpeg-turbo may decode as it is; None: Pillow must."""
    found = header(data)
    if found is None or found.colorspace not in FAST_COLORSPACES or not upright(data):
        return None
    return found.height, found.width


def decodes(data: bytes) -> bool:
    """True if libjpeg decodes every scan without a single warning.

    The decode runs at 1/8 scale: every coefficient is still entropy-decoded (which
    is what finds truncation and corruption), only the inverse DCT shrinks. False
    means "ask Pillow", not "broken": Pillow tolerates some benign warnings.
    """
    if header(data) is None:
        return False
    return decode_rgb(data, (1, 1), 1.0, colorspace="GRAY") is not None


def decode_rgb(data: Buffer, least: tuple[int, int], min_factor: float,
               colorspace: str = "RGB") -> np.ndarray | None:
    """(H, W, 3) uint8 pixels scaled down by at least `min_factor` in the DCT domain while
    staying at least `least` (H, W); None if simplejpeg declines, which it does at any
    libjpeg warning too (strict): Pillow, which tolerates some, is the judge of those."""
    if not native(data):
        return None
    try:
        pixels: np.ndarray = simplejpeg.decode_jpeg(
            data, colorspace=colorspace, min_height=least[0], min_width=least[1],
            strict=True, min_factor=min_factor)
    except Exception:
        return None
    return pixels


def scaled_size(full: tuple[int, int], factor: int) -> tuple[int, int]:
    """(H, W) of the `full`-size image decoded at 1/factor: libjpeg rounds each side up."""
    return -(-full[0] // factor), -(-full[1] // factor)


def decode_scaled(data: Buffer, full: tuple[int, int], factor: int) -> np.ndarray | None:
    """Exactly 1/factor of the (H, W) `full` image (each side rounded up); None if declined."""
    return decode_rgb(data, scaled_size(full, factor), float(factor))


def decode_box(data: Buffer, full: tuple[int, int], factor: int,
               box: tuple[int, int, int, int]) -> np.ndarray | None:
    """The (height, width, 3) pixels of `box` (top, left, height, width, in pixels of the
    1/factor image) of the `full`-size JPEG; None if declined, as decode_scaled.

    Only a file that ends in EOI takes the cropped decode: one that stops early (truncated)
    must fail as the full strict decode fails, whichever box the epoch drew (the extension
    also reads every row's entropy data to the end, so damage below the box fails too).
    A box of the whole image gains nothing from it.
    """
    whole = box == (0, 0, *scaled_size(full, factor))
    cropped = extension().decode
    if cropped is not None and not whole and data[-2:] == EOI:
        try:
            pixels = cropped(data, *box, factor)
        except ValueError:  # any libjpeg error or warning: Pillow judges
            return None
        return np.frombuffer(pixels, np.uint8).reshape(box[2], box[3], 3)
    scaled = decode_scaled(data, full, factor)
    top, left, height, width = box
    return None if scaled is None else scaled[top:top + height, left:left + width]


def decoded_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """The smallest (width, height) the decode must reach: the scaled size, never larger."""
    return min(width, math.ceil(width * scale)), min(height, math.ceil(height * scale))


def load_rgb_fast(data: bytes, size: tuple[int, int],
                  fit: Fit) -> tuple[np.ndarray, tuple[int, int]] | None:
    """Upright (H, W, 3) uint8 pixels at least as large as fitting to `size` needs, and
    the (width, height) before scaling; None: use Pillow.

    DCT scaling by M/8 only for M <= 4 (MIN_DCT_FACTOR): libjpeg-turbo decodes 5/8, 6/8
    and 7/8 slower than the whole image, where 1/2 and 3/8 are faster than it.
    """
    full = fast_size(data)
    if full is None:
        return None
    height, width = full
    scale = target_scale((width, height), size, fit, None, False)
    need_w, need_h = decoded_size(width, height, min(1.0, OVERSAMPLE * scale))
    pixels = decode_rgb(data, (need_h, need_w), MIN_DCT_FACTOR)
    return None if pixels is None else (pixels, (width, height))


def decode_gray(data: Buffer, least: tuple[int, int]) -> np.ndarray | None:
    """(H, W) uint8 luminance at the coarsest DCT scale that stays at least `least`
    (H, W); None if the fast path may not decode it or libjpeg refuses (lenient: warnings
    pass, as a hash of a thumbnail tolerates them)."""
    if not native(data):
        return None
    try:
        pixels: np.ndarray = simplejpeg.decode_jpeg(data, colorspace="GRAY",
                                                    min_height=least[0], min_width=least[1])
    except Exception:  # any libjpeg refusal: Pillow judges
        return None
    return pixels[:, :, 0]
