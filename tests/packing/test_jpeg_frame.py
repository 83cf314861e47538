"""The JPEG frame-header walk (packer.imaging.jpeg_frame) that guards every native decode,
and the Pillow path it sends the other streams down (packer.imaging.pillow)."""

from __future__ import annotations

import io
import struct
import timeit

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from packer.imaging import jpeg
from packer.imaging.jpeg_frame import native, native_refusal, read_frame
from packer.imaging.pillow import check_decodes, load_rgb, open_image
from tests.helpers import jpeg_bytes, png_bytes, random_image
from tests.jpeg_variant_support import (
    damaged_variants,
    flat_blocks_jpeg,
    frame_offset,
    gradient,
    lossless_jpeg,
    relabelled_variants,
    valid_variants,
)

BASELINE = jpeg_bytes(random_image(40, 24, seed=4))
LOSSLESS = lossless_jpeg(gradient(40, 24)[:, :, 0])


def sampled(data: bytes, factors: tuple[int, ...]) -> bytes:
    """`data` with its frame's sampling-factor bytes replaced by `factors`."""
    out = bytearray(data)
    for c, factor in enumerate(factors):
        out[frame_offset(data) + 11 + 3 * c] = factor
    return bytes(out)


def test_frame_of_ordinary_jpegs() -> None:
    frame = read_frame(BASELINE)
    assert frame is not None
    assert (frame.sof, frame.precision, frame.height, frame.width) == (0xC0, 8, 24, 40)
    assert frame.sampling == ((2, 2), (1, 1), (1, 1)) and frame.dct_scalable
    gray = read_frame(jpeg_bytes(random_image(9, 7).convert("L"), progressive=True))
    assert gray is not None and gray.sof == 0xC2 and gray.sampling == ((1, 1),)
    assert native(BASELINE) and native(memoryview(BASELINE))
    assert native(memoryview(BASELINE + b"\x00").cast("B")[:-1])


@pytest.mark.parametrize(("data", "reason"), [
    (LOSSLESS, "lossless JPEG"),
    (lossless_jpeg(gradient(16, 8)), "lossless JPEG"),
    (lossless_jpeg(gradient(16, 8)[:, :, 0].astype(np.uint16) * 257, 16), "lossless JPEG"),
    (flat_blocks_jpeg(np.full((2, 3), 1000)), "12-bit JPEG"),
    (relabelled_variants(BASELINE, LOSSLESS)["baseline-with_dhp"], "hierarchical baseline"),
    (relabelled_variants(BASELINE, LOSSLESS)["baseline-as_arithmetic"], "arithmetic-coded"),
    (jpeg_bytes(random_image(16, 8).convert("CMYK")), "JPEG of 4 components"),
    (sampled(BASELINE, (0x41, 0x11, 0x11)), "sampling factors 4x1,1x1,1x1"),
    (sampled(BASELINE, (0x22, 0x21, 0x11)), "sampling factors 2x2,2x1,1x1"),
    (BASELINE[:frame_offset(BASELINE) + 6], "no readable JPEG frame header"),
    (png_bytes(random_image(4, 4)), "no readable JPEG frame header"),
    (b"", "no readable JPEG frame header"),
])
def test_native_refusal_names_the_kind(data: bytes, reason: str) -> None:
    refusal = native_refusal(data)
    assert refusal is not None and reason in refusal, refusal


def test_fill_bytes_pass_and_garbage_between_segments_does_not() -> None:
    at = frame_offset(BASELINE)
    assert native(BASELINE[:at] + b"\xff\xff\xff" + BASELINE[at:])
    assert read_frame(BASELINE[:at] + b"\x00" + BASELINE[at:]) is None
    zero_height = bytearray(BASELINE)
    zero_height[at + 5 : at + 7] = b"\x00\x00"  # height 0: defined later by DNL
    assert read_frame(bytes(zero_height)) is None
    assert read_frame(b"\xff\xd8" + b"\xff\xe0\x00\x02" * 5000) is None  # bounded walk


def test_every_prefix_and_every_flipped_header_byte_is_safe() -> None:
    for data in (BASELINE, LOSSLESS):
        header = frame_offset(data) + 20
        for cut in range(len(data)):
            read_frame(data[:cut])
        for position in range(header):
            for flip in (0x01, 0x80, 0xFF):
                damaged = bytearray(data)
                damaged[position] ^= flip
                frame = read_frame(bytes(damaged))
                assert frame is None or (frame.height > 0 and frame.width > 0)


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_read_frame_never_raises(head: bytes, tail: bytes) -> None:
    for data in (b"\xff\xd8" + head, head + tail, b"\xff\xd8\xff" + head + BASELINE[2:]):
        read_frame(data)
        assert native(data) == (native_refusal(data) is None)


def test_the_quick_verdict_is_the_worded_one() -> None:
    """native() reads the frame's bytes; native_refusal() words the same decision."""
    streams = {**valid_variants(), **relabelled_variants(BASELINE, LOSSLESS)}
    for name, data in list(streams.items()):
        streams.update(damaged_variants(name, data))
    for factors in ((0x11,), (0x22,), (0x41,), (0x12, 0x11, 0x11), (0x22, 0x11, 0x12)):
        streams[str(factors)] = sampled(BASELINE, factors)
    for name, data in streams.items():
        assert native(data) == (native_refusal(data) is None), name
    assert sum(native(data) for data in streams.values()) > 10


def test_fast_paths_decline_what_the_frame_refuses() -> None:
    assert jpeg.fast_size(LOSSLESS) is None and jpeg.header(LOSSLESS) is None
    assert jpeg.decode_rgb(LOSSLESS, (1, 1), 1.0) is None
    assert jpeg.decode_box(LOSSLESS, (24, 40), 1, (1, 1, 4, 4)) is None
    assert jpeg.decode_gray(LOSSLESS, (8, 9)) is None and not jpeg.decodes(LOSSLESS)
    assert jpeg.load_rgb_fast(LOSSLESS, (8, 8), "crop") is None
    assert jpeg.fast_size(BASELINE) == (24, 40)
    gray = jpeg.decode_gray(BASELINE, (8, 9))
    assert gray is not None and gray.shape[0] >= 8 and 9 <= gray.shape[1] < 40  # DCT-scaled


def test_pillow_decodes_lossless_without_draft() -> None:
    """Pillow's draft refuses lossless streams: the Pillow path decodes them whole."""
    whole = np.asarray(Image.open(io.BytesIO(LOSSLESS)).convert("RGB"))
    assert np.array_equal(np.asarray(load_rgb(LOSSLESS)), whole)
    assert load_rgb(LOSSLESS, size=(6, 10)).size == (40, 24)  # whole: the caller resizes
    assert check_decodes(LOSSLESS).size == (40, 24)
    assert load_rgb(BASELINE, size=(6, 10)).size == (20, 12)  # DCT-scaled to 2x the size


def test_a_jpeg_pillow_cannot_open_is_named() -> None:
    with pytest.raises(OSError, match=r"12-bit extended JPEG .*re-encode"):
        open_image(flat_blocks_jpeg(np.full((1, 2), 7)))
    with pytest.raises(OSError, match="cannot identify"):
        open_image(b"\xff\xd8" + struct.pack(">BBH", 0xFF, 0xC0, 3) + b"\x00")


@pytest.mark.perf
def test_the_header_walk_is_cheap() -> None:
    number = 20000
    seconds = timeit.timeit(lambda: native(BASELINE), number=number) / number
    assert seconds < 20e-6, seconds
