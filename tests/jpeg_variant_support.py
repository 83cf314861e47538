"""JPEG variants for the decode-safety tests: every kind libjpeg-turbo's `cjpeg` writes, the
lossless (SOF3) and 12-bit (SOF1) streams it writes only from release 3 on (written here
by a small encoder where it cannot), and truncated and garbled copies of each.

The encoders here write what the JPEG standard (ITU T.81) allows and no more: lossless
streams with predictor 1 and one 5-bit Huffman code per difference category, and 12-bit
DCT streams whose 8x8 blocks are flat (each block only a DC coefficient).
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess

import numpy as np
from PIL import Image

CJPEG = shutil.which("cjpeg")
CATEGORY_BITS = 5  # every Huffman symbol (a difference category 0..16) is a 5-bit code
NO_CJPEG = "libjpeg-turbo's cjpeg is not installed (Debian: apt-get install libjpeg-turbo-progs)"

# name -> cjpeg switches (the input is a PPM, or a PGM where the name says gray)
CJPEG_VARIANTS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "progressive": ("-progressive",),
    "arithmetic": ("-arithmetic",),
    "progressive_arithmetic": ("-progressive", "-arithmetic"),
    "restart": ("-restart", "1"),
    "restart_blocks": ("-restart", "1B"),
    "grayscale": ("-grayscale",),
    "gray_input": (),
    "optimize": ("-optimize",),
    "rgb": ("-rgb",),
    "sample_1x2": ("-sample", "1x2"),
    "sample_4x1": ("-sample", "4x1"),
    "sample_mixed": ("-sample", "2x1,1x2,1x1"),
    "sample_4x2": ("-sample", "4x2"),
    "sample_3x1": ("-sample", "3x1"),
    "quality_100": ("-quality", "100"),
}
# cjpeg 3.0 and later: lossless and 12/16-bit streams from the program itself
CJPEG3_VARIANTS: dict[str, tuple[str, ...]] = {
    "cjpeg_lossless": ("-lossless", "1"),
    "cjpeg_lossless_gray": ("-lossless", "1", "-grayscale"),
    "cjpeg_precision12": ("-precision", "12"),
    "cjpeg_lossless16": ("-lossless", "1", "-precision", "16"),
}


def _segment(marker: int, body: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body


def _frame(sof: int, precision: int, height: int, width: int, components: int,
           sampling: int = 0x11) -> bytes:
    body = struct.pack(">BHHB", precision, height, width, components)
    body += b"".join(struct.pack(">BBB", c + 1, sampling, 0) for c in range(components))
    return _segment(sof, body)


def _huffman_table(table_class: int, count: int) -> bytes:
    """A DHT segment: symbols 0..count-1, each a CATEGORY_BITS-bit code."""
    bits = [0] * 16
    bits[CATEGORY_BITS - 1] = count
    return _segment(0xC4, bytes([table_class << 4]) + bytes(bits) + bytes(range(count)))


class _BitWriter:
    """Entropy-coded bits, MSB first, with 0xFF byte stuffing."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.value = 0
        self.count = 0

    def put(self, value: int, bits: int) -> None:
        self.value = (self.value << bits) | (value & ((1 << bits) - 1))
        self.count += bits
        while self.count >= 8:
            self.count -= 8
            byte = (self.value >> self.count) & 0xFF
            self.out += b"\xff\x00" if byte == 0xFF else bytes([byte])
        self.value &= (1 << self.count) - 1

    def difference(self, diff: int) -> None:
        """A Huffman-coded category and the difference's extra bits (T.81 F.1.2.1)."""
        category = 16 if diff == 32768 else abs(diff).bit_length()
        self.put(category, CATEGORY_BITS)
        if 0 < category < 16:
            self.put(diff if diff > 0 else diff - 1, category)

    def flush(self) -> bytes:
        if self.count:
            self.put((1 << (8 - self.count)) - 1, 8 - self.count)
        return bytes(self.out)


def _predictions(plane: np.ndarray, precision: int) -> np.ndarray:
    """Predictor 1 (left); the first column predicts from above, the first sample from
    2^(P-1) (T.81 H.1.2.1)."""
    pred = np.empty_like(plane)
    pred[:, 1:] = plane[:, :-1]
    pred[1:, 0] = plane[:-1, 0]
    pred[0, 0] = 1 << (precision - 1)
    return pred


def lossless_jpeg(pixels: np.ndarray, precision: int = 8) -> bytes:
    """A lossless (SOF3) JPEG of (H, W) or (H, W, 3) samples below 2**precision."""
    planes = pixels.astype(np.int64).reshape(pixels.shape[0], pixels.shape[1], -1)
    height, width, count = planes.shape
    diffs = np.stack([(planes[:, :, c] - _predictions(planes[:, :, c], precision)) % 65536
                      for c in range(count)], axis=-1)
    diffs = np.where(diffs > 32768, diffs - 65536, diffs)
    writer = _BitWriter()
    for diff in diffs.reshape(-1).tolist():
        writer.difference(int(diff))
    scan = struct.pack(">B", count) + b"".join(bytes([c + 1, 0x00]) for c in range(count))
    return (b"\xff\xd8" + _frame(0xC3, precision, height, width, count)
            + _huffman_table(0, 17) + _segment(0xDA, scan + bytes([1, 0, 0]))
            + writer.flush() + b"\xff\xd9")


def flat_blocks_jpeg(blocks: np.ndarray, precision: int = 12) -> bytes:
    """An extended (SOF1) gray JPEG of `precision` bits whose 8x8 blocks have the levels
    `blocks` (rows x cols below 2**precision): only DC coefficients, quantized by 1."""
    rows, cols = blocks.shape
    middle = 1 << (precision - 1)
    dc = (blocks.astype(np.int64) - middle) * 8  # a flat block's DC is 8x its level offset
    writer = _BitWriter()
    previous = 0
    for value in dc.reshape(-1).tolist():
        writer.difference(int(value) - previous)
        writer.put(0, CATEGORY_BITS)  # AC symbol 0x00: end of block
        previous = int(value)
    wide = precision > 8
    quant = _segment(0xDB, bytes([0x10 if wide else 0x00])
                     + (struct.pack(">64H", *([1] * 64)) if wide else bytes([1] * 64)))
    scan = bytes([1, 1, 0x00, 0, 63, 0])
    return (b"\xff\xd8" + quant + _frame(0xC1, precision, rows * 8, cols * 8, 1)
            + _huffman_table(0, 16) + _huffman_table(1, 1) + _segment(0xDA, scan)
            + writer.flush() + b"\xff\xd9")


def _pnm(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PPM")
    return out.getvalue()


def cjpeg_supports(switch: str) -> bool:
    """Whether this cjpeg knows `switch` (lossless and precision came with release 3)."""
    if CJPEG is None:
        return False
    shown = subprocess.run([CJPEG, "-help"], capture_output=True, text=True, check=False)
    return switch in shown.stdout + shown.stderr


def cjpeg(image: Image.Image, switches: tuple[str, ...]) -> bytes:
    """`image` (RGB or L) compressed by cjpeg with `switches`."""
    if CJPEG is None:
        raise RuntimeError(NO_CJPEG)
    done = subprocess.run([CJPEG, *switches], input=_pnm(image), capture_output=True,
                          check=True)
    return done.stdout


def gradient(width: int, height: int) -> np.ndarray:
    """(H, W, 3) uint8 with detail in every direction, deterministic."""
    rows, cols = np.mgrid[0:height, 0:width]
    return np.stack([rows * 255 // max(1, height - 1), cols * 255 // max(1, width - 1),
                     (rows * 7 + cols * 13) % 256], axis=-1).astype(np.uint8)


def valid_variants(width: int = 40, height: int = 24) -> dict[str, bytes]:
    """Every valid JPEG variant: cjpeg's (where installed) and the encoders' above."""
    rgb = Image.fromarray(gradient(width, height), "RGB")
    out: dict[str, bytes] = {}
    if CJPEG is not None:
        for name, switches in CJPEG_VARIANTS.items():
            out[name] = cjpeg(rgb.convert("L") if name == "gray_input" else rgb, switches)
        if cjpeg_supports("-lossless"):
            for name, switches in CJPEG3_VARIANTS.items():
                out[name] = cjpeg(rgb, switches)
    pixels = gradient(width, height)
    out["lossless_gray"] = lossless_jpeg(pixels[:, :, 0])
    out["lossless_rgb"] = lossless_jpeg(pixels)
    out["lossless_gray12"] = lossless_jpeg(pixels[:, :, 1].astype(np.uint16) * 16, 12)
    out["lossless_gray16"] = lossless_jpeg(pixels[:, :, 2].astype(np.uint16) * 257, 16)
    out["extended12"] = flat_blocks_jpeg(
        np.arange((height // 8) * (width // 8)).reshape(height // 8, width // 8) * 97 % 4096)
    return out


def damaged_variants(name: str, data: bytes) -> dict[str, bytes]:
    """Truncated and garbled copies of one JPEG: cut at several points, bytes flipped in
    the header and in the scan data."""
    scan = data.find(b"\xff\xda")
    header_end = scan if scan > 0 else min(len(data), 160)
    out = {f"{name}-cut{cut}": data[:cut] for cut in (2, 20, header_end, header_end + 12)}
    out[f"{name}-cut_half"] = data[: len(data) // 2]
    out[f"{name}-cut_eoi"] = data[:-2]
    for label, start, stop in (("head", 2, header_end), ("scan", header_end + 16, len(data) - 2)):
        garbled = bytearray(data)
        for position in range(start, stop, max(1, (stop - start) // 6)):
            garbled[position] ^= 0x5A
        out[f"{name}-garbled_{label}"] = bytes(garbled)
    return out


def frame_offset(data: bytes) -> int:
    """Where the first SOFn marker of a well-formed JPEG starts (segments walked by length)."""
    position = 2
    while not 0xC0 <= data[position + 1] <= 0xCF or data[position + 1] in (0xC4, 0xC8, 0xCC):
        position += 2 + struct.unpack_from(">H", data, position + 2)[0]
    return position


def relabelled_variants(baseline: bytes, lossless: bytes) -> dict[str, bytes]:
    """Frame headers that lie about the scan: a baseline stream marked lossless, arithmetic,
    hierarchical or 12-bit, a lossless one marked baseline or progressive, and a DHP
    segment (hierarchical) before an ordinary frame."""
    def marked(data: bytes, marker: int) -> bytes:
        at = frame_offset(data)
        return data[: at + 1] + bytes([marker]) + data[at + 2 :]

    at = frame_offset(baseline)
    length = struct.unpack_from(">H", baseline, at + 2)[0]
    dhp = _segment(0xDE, baseline[at + 4 : at + 2 + length])
    return {
        "baseline-as_lossless": marked(baseline, 0xC3),
        "baseline-as_arithmetic": marked(baseline, 0xC9),
        "baseline-as_hierarchical": marked(baseline, 0xC5),
        "baseline-as_12bit": baseline[: at + 4] + b"\x0c" + baseline[at + 5 :],
        "baseline-with_dhp": baseline[:at] + dhp + baseline[at:],
        "lossless-as_baseline": marked(lossless, 0xC0),
        "lossless-as_progressive": marked(lossless, 0xC2),
    }
