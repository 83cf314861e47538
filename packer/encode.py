"""Turn a SourceItem into a Record: pass-through, resize + re-encode, or raw pixels.

Runs in the worker threads. Every failure becomes a Reject with a reason a person
understands, so the writer decides (skip or fail) and nothing vanishes silently.

An item's bytes come from its file, or `item.origin` reads them: an archive member
(`ArchiveSource`), encoded exactly as the extracted file would be, or a sample of a
packed dataset (`PackedSource`): an encoded image, or raw RGB pixels (npy),
which are re-encoded (PNG unless asked otherwise) or resized as the options say.
"""

from __future__ import annotations

import io
import sys
import zlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

from packer.core.checks import digest_of
from packer.core.record import Record, Reject, SourceItem
from packer.errors import RejectReason, UnsupportedImageError, interrupted
from packer.imaging.jpeg import decodes as jpeg_decodes
from packer.imaging.jpeg import load_rgb_fast
from packer.imaging.pillow import (
    Fit,
    check_decodes,
    fit_image,
    load_rgb_sized,
    open_image,
    resize_shorter,
)
from packer.imaging.resize import fit_pixels
from packer.storage.files import read_input

Check = Literal["decode", "header", "none"]
Codec = Literal["jpeg", "png", "webp"]
CODEC_EXT = {"jpeg": "jpg", "png": "png", "webp": "webp"}
FORMAT_EXT = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif",
              "BMP": "bmp", "TIFF": "tif", "PPM": "ppm"}  # MPO: a camera JPEG, stored as one
PIXELS_EXT = "rgb"
MAGIC_EXT = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"GIF8", "gif"),
             (b"BM", "bmp"), (b"II*\x00", "tif"), (b"MM\x00*", "tif"), (b"RIFF", "riff"))


@dataclass(frozen=True)
class EncodeOptions:
    """How inputs are checked and transformed; validated when built.

    Defaults store the original bytes bit for bit. `pixels=True` (the npy format)
    stores raw RGB at `size`.
    """

    check: Check = "decode"
    resize: int | None = None
    size: tuple[int, int] | None = None
    fit: Fit = "crop"
    codec: Codec | None = None
    quality: int = 90
    upscale: bool = False
    pixels: bool = False

    def __post_init__(self) -> None:
        if self.check not in ("decode", "header", "none"):
            raise ValueError(f"check must be decode, header or none, not {self.check!r}")
        if self.fit not in ("stretch", "crop", "pad"):
            raise ValueError(f"fit must be stretch, crop or pad, not {self.fit!r}")
        if self.codec is not None and self.codec not in CODEC_EXT:
            raise ValueError(f"encode must be jpeg, png or webp, not {self.codec!r}")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be 1..100, not {self.quality}")
        if self.resize is not None and self.resize < 1:
            raise ValueError(f"resize must be a positive number of pixels, not {self.resize}")
        if self.resize is not None and self.size is not None:
            raise ValueError("give either resize (shorter side) or size (HxW), not both")
        if self.size is not None and min(self.size) < 1:
            raise ValueError(f"size must be positive HxW, not {self.size}")
        if self.pixels and self.size is None:
            raise ValueError("raw pixels need a fixed size (HxW)")
        self._check_output_pixels()

    def _check_output_pixels(self) -> None:
        """Refuse a size whose images could not be decoded again: past Pillow's
        decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`), which the readers keep too."""
        limit = Image.MAX_IMAGE_PIXELS
        height, width = self.size or (self.resize or 0, self.resize or 0)
        if limit is not None and height * width > limit:
            asked = f"size {height}x{width}" if self.size else f"resize {self.resize}"
            raise ValueError(f"{asked} makes images of {height * width:,} pixels or more, past "
                             f"the {int(limit):,} an image may have (Pillow's decompression-"
                             "bomb limit); choose a smaller size")

    @property
    def transforms(self) -> bool:
        """Whether images are decoded and re-encoded rather than passed through."""
        return self.resize is not None or self.size is not None or self.codec is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["size"] = list(self.size) if self.size else None
        data["mode"] = "pixels" if self.pixels else "reencode" if self.transforms else "passthrough"
        return data


def encode_item(item: SourceItem, options: EncodeOptions) -> Record | Reject:
    """Read, check and encode one input; any problem becomes a Reject."""
    origin = item.origin
    fields = item.fields
    try:
        if origin is not None and not fields:
            read_fields = getattr(origin, "read_fields", None)  # a packed dataset's fields
            fields = read_fields(item) if read_fields is not None else b""
        if origin is None or origin.whole_files:  # a file, or an archive member
            data = read_input(item.path) if origin is None else origin.read(item)
            if not data:
                return Reject(item.position, item.path, "zero bytes: the file is empty")
            stored, ext = _encode_bytes(data, item.path, options)
        else:
            stored, ext = _encode_packed(origin.read(item), origin.pixel_size, options)
    except RejectReason as reason:
        return Reject(item.position, item.path, str(reason))
    except Exception as exc:  # a damaged file can make any decoder raise anything
        if interrupted(exc):  # Ctrl-C wrapped by the code it landed in: still Ctrl-C
            raise KeyboardInterrupt from exc
        return Reject(item.position, item.path, describe_failure(exc))
    return Record(item.position, item.key, item.label, stored, ext, digest_of(stored), fields)


def encode_batch(items: Iterable[SourceItem], options: EncodeOptions) -> list[Record | Reject]:
    """Worker entry point: one task covers several items to amortize inter-process cost."""
    return [encode_item(item, options) for item in items]


def describe_failure(exc: BaseException) -> str:
    """A reason for rejects.jsonl from whatever the decoder raised."""
    if isinstance(exc, UnsupportedImageError):
        return f"unsupported: {exc}"
    if isinstance(exc, UnidentifiedImageError):
        return "not an image: no decoder recognizes the bytes"
    if isinstance(exc, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return f"decompression bomb: {exc}"
    text = str(exc) or type(exc).__name__
    if "truncated" in text.lower():
        return f"truncated: {text}"
    if isinstance(exc, (zlib.error, SyntaxError, OSError, ValueError, EOFError)):
        return f"corrupt: {text}"
    return f"corrupt: {type(exc).__name__}: {text}"


def _encode_bytes(data: bytes, path: str | None, options: EncodeOptions) -> tuple[bytes, str]:
    """Encode a file's bytes (`path` names its extension; None: tell it from the bytes)."""
    if options.pixels:
        assert options.size is not None  # guaranteed by EncodeOptions validation
        return rgb_pixels(data, options.size, options.fit), PIXELS_EXT
    if options.transforms:
        image, source = load_rgb_sized(data, size=options.size, fit=options.fit,
                                       shorter=options.resize, upscale=options.upscale)
        return _save(_resized(image, options, source), options.codec or "jpeg",
                     options.quality)
    return data, _checked_ext(data, path, options.check)


def _encode_packed(data: bytes, pixel_size: tuple[int, int] | None,
                   options: EncodeOptions) -> tuple[bytes, str]:
    """Encode a packed sample: an image like a file's, or raw RGB pixels of `pixel_size`."""
    if pixel_size is None:
        return _encode_bytes(data, None, options)
    height, width = pixel_size
    if options.pixels and options.size == pixel_size:
        return data, PIXELS_EXT  # npy to npy at the same size: the pixels as they are
    image = Image.frombuffer("RGB", (width, height), data, "raw", "RGB", 0, 1)
    if options.pixels:
        assert options.size is not None  # guaranteed by EncodeOptions validation
        return fit_pixels(np.array(image), options.size, options.fit), PIXELS_EXT
    return _save(_resized(image, options), options.codec or "png", options.quality)


def rgb_pixels(data: bytes, size: tuple[int, int], fit: Fit) -> bytes:
    """Raw RGB at exactly `size`: DCT-scaled decode, then one antialiased resize."""
    fast = load_rgb_fast(data, size, fit)
    if fast is not None:
        pixels, source = fast
        return fit_pixels(pixels, size, fit, source)
    image, source = load_rgb_sized(data, size=size, fit=fit)  # Pillow: any format, EXIF
    return fit_pixels(np.array(image), size, fit, source)  # a writable copy for torch


def _checked_ext(data: bytes, path: str | None, check: Check) -> str:
    """Pass-through: check as asked; name the extension after the real format when known."""
    if check == "none":
        if path is None:
            return sniff_ext(data)
        suffix = path.rsplit(".", 1)[-1].lower() if "." in path else "bin"
        return "jpg" if suffix == "jpeg" else sys.intern(suffix)  # one object, not one per image
    if check == "decode" and jpeg_decodes(data):
        return "jpg"
    image = check_decodes(data) if check == "decode" else open_image(data)
    return FORMAT_EXT.get(image.format or "", (image.format or "bin").lower())


def sniff_ext(data: bytes) -> str:
    """The extension of an encoded image, told from its first bytes ("bin" if unknown)."""
    for magic, ext in MAGIC_EXT:
        if data.startswith(magic):
            return "webp" if ext == "riff" and data[8:12] == b"WEBP" else ext
    if len(data) > 1 and data[:1] == b"P" and data[1:2] in b"123456":
        return "ppm"
    return "bin"


def _resized(image: Image.Image, options: EncodeOptions,
             source: tuple[int, int] | None = None) -> Image.Image:
    if options.size is not None:
        return fit_image(image, options.size, options.fit, source)
    if options.resize is not None:
        return resize_shorter(image, options.resize, options.upscale, source)
    return image


def _save(image: Image.Image, codec: Codec, quality: int) -> tuple[bytes, str]:
    out = io.BytesIO()
    save_args: dict[str, Any] = {"quality": quality} if codec != "png" else {}
    image.save(out, format=codec.upper(), **save_args)
    return out.getvalue(), CODEC_EXT[codec]
