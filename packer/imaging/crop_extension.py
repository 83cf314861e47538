"""Which cropped JPEG decode runs, and why: the compiled extension, checked once per process.

The optional extension `_cropjpeg` (packer/imaging/_cropjpeg.c, libjpeg-turbo) decodes only
a box of a JPEG. It is used only if it imports and its self-test passes: crops whose top
edge lies inside an iMCU row, at every DCT scale, must equal the full decode cut to the
box (some libjpeg-turbo versions' jpeg_skip_scanlines return stale rows for skips off a
row-group boundary; the extension never skips from there, and the self-test proves the
pair of extension and library in this process). Otherwise decode_box takes the full decode
cut to the box: the same pixels, slower. The decode handed out checks each stream's frame
header first (`native`) and refuses, as libjpeg's own errors are refused, any stream the
native path is not known to handle. `status()` says which decode runs in one line
(`pack info --env`, `pack profile`).

Configuration, not a switch: `PACKER_CROP_DECODE=full` in the environment turns the
extension off for this process and its DataLoader workers (fork or spawn alike);
`full_decode_only()` does the same for a block and restores what was there.
`PACKER_REQUIRE_EXTENSION=1` makes `require_extension()` (run by the test suite) fail
where the extension is missing or failed its self-test, so a build that silently fell
back cannot pass CI.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import numpy as np
import simplejpeg

from packer.errors import (
    ExtensionMissingError as ExtensionMissingError,  # defined with every error class
)
from packer.imaging.jpeg_frame import native, native_refusal

CropDecode = Callable[[bytes | bytearray | memoryview, int, int, int, int, int], bytearray]
OFF_SWITCH = "PACKER_CROP_DECODE"
REQUIRE_SWITCH = "PACKER_REQUIRE_EXTENSION"
DCT_DENOMS = (1, 2, 4, 8)


@dataclass(frozen=True)
class CropExtension:
    """The compiled decode if it may be used (else None), and the one-line reason."""

    decode: CropDecode | None
    status: str


def _version_text(number: int) -> str:
    """libjpeg-turbo's MMMmmmppp version number as M.m.p (2001005: 2.1.5)."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _test_image() -> bytes:
    """A 4:2:0 JPEG of 75 x 93 px (no side a multiple of its 16-row iMCU) whose rows
    all differ, so a stale or shifted row changes the pixels."""
    rows, cols = np.mgrid[0:75, 0:93]
    pixels = np.stack([rows * 3 % 256, cols * 5 % 256, (rows * cols) % 251], axis=-1)
    return bytes(simplejpeg.encode_jpeg(np.ascontiguousarray(pixels, np.uint8), quality=90,
                                        colorsubsampling="420"))


def self_test(decode: CropDecode) -> str | None:
    """None if `decode` gives the full decode's pixels for crops whose top edge is off an
    iMCU-row boundary (and boxes of several rows) at every DCT scale; else what differed."""
    data = _test_image()
    for denom in DCT_DENOMS:
        full = simplejpeg.decode_jpeg(data, colorspace="RGB", min_factor=denom, strict=True,
                                      min_height=-(-75 // denom), min_width=-(-93 // denom))
        height, width = full.shape[:2]
        for top in sorted({1, 3, height // 2 + 1, height - 3} & set(range(1, height))):
            rows = min(height - top, 19)
            box = (top, 1, rows, width - 2)
            got = np.frombuffer(decode(data, *box, denom), np.uint8).reshape(rows, width - 2, 3)
            if not np.array_equal(got, full[top:top + rows, 1:width - 1]):
                return f"a crop at row {top} of the 1/{denom} decode differs from the full decode"
    return None


def _guarded(decode: CropDecode) -> CropDecode:
    """`decode` for the streams the native path may see; any other raises ValueError, as a
    libjpeg error does, so the caller falls back to Pillow."""
    def checked(data: bytes | bytearray | memoryview, top: int, left: int, height: int,
                width: int, denom: int) -> bytearray:
        if not native(data):
            raise ValueError("the compiled decode does not take this stream: "
                             f"{native_refusal(data)}")
        return decode(data, top, left, height, width, denom)
    return checked


@cache
def _load() -> CropExtension:
    try:
        module = importlib.import_module("packer.imaging._cropjpeg")
    except ImportError as exc:
        return CropExtension(None, f"full decode cut to the box: the extension is not "
                                   f"built ({exc}); see docs/guides/reading.md")
    decode = _guarded(module.decode_crop)
    version = _version_text(int(getattr(module, "libjpeg_turbo_version", 0)))
    try:
        failure = self_test(decode)
    except ValueError as exc:
        failure = str(exc)
    if failure is not None:
        return CropExtension(None, f"full decode cut to the box: the extension (libjpeg-turbo "
                                   f"{version}) failed its self-test: {failure}")
    return CropExtension(decode, f"compiled cropped decode (libjpeg-turbo {version})")


def extension() -> CropExtension:
    """The compiled decode for this process, honouring PACKER_CROP_DECODE=full."""
    loaded = _load()
    if os.environ.get(OFF_SWITCH) == "full" and loaded.decode is not None:
        return CropExtension(None, f"full decode cut to the box: {OFF_SWITCH}=full "
                                   f"(available: {loaded.status})")
    return loaded


def status() -> str:
    """One line: which cropped decode runs here, and why."""
    return extension().status


@contextmanager
def full_decode_only() -> Iterator[None]:
    """Within the block (and in DataLoader workers started in it) crops take the full
    decode cut to the box; the environment is restored afterwards."""
    before = os.environ.get(OFF_SWITCH)
    os.environ[OFF_SWITCH] = "full"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OFF_SWITCH, None)
        else:
            os.environ[OFF_SWITCH] = before


def require_extension() -> None:
    """Raise ExtensionMissingError if PACKER_REQUIRE_EXTENSION=1 and the compiled decode
    cannot be used (not built, or failed its self-test)."""
    if os.environ.get(REQUIRE_SWITCH) == "1" and _load().decode is None:
        raise ExtensionMissingError(f"{REQUIRE_SWITCH}=1 but {_load().status}; install "
                                    "libjpeg-turbo's headers (Debian: libjpeg62-turbo-dev) "
                                    "and reinstall: pip install -e .")
