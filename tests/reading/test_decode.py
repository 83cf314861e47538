"""readers.decoding.decode: fast paths agree with Pillow, every mode ends up RGB, clear errors."""

from __future__ import annotations

import io
from typing import Literal

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFilter

from packer.imaging.jpeg_frame import exif_orientation
from packer.testing import synthetic_image
from readers.decoding.decode import DecodeError, decode

MAX_MEAN_ERROR = 3.0


def photo_like(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth shading, sharp edges and mild grain, like a camera picture."""
    rng = np.random.default_rng(seed)
    image = synthetic_image(rng, width, height).filter(ImageFilter.GaussianBlur(1.5))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x0, y0 = int(rng.integers(0, width // 2)), int(rng.integers(0, height // 2))
        x1, y1 = x0 + int(rng.integers(4, width // 2)), y0 + int(rng.integers(4, height // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
        draw.rectangle((x0, y0, x1, y1), fill=colour)
    return image


def encoded(image: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def pillow_reference(data: bytes, size: tuple[int, int]) -> np.ndarray:
    """The common pipeline: full decode, RGB, Pillow bilinear stretch."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return np.asarray(image.resize((size[1], size[0]), Image.Resampling.BILINEAR))


def mean_error(tensor: torch.Tensor, reference: np.ndarray) -> float:
    pixels = tensor.permute(1, 2, 0).numpy().astype(np.int16)
    return float(np.abs(pixels - reference.astype(np.int16)).mean())


SOURCES = [(1800, 1200), (900, 700), (640, 480), (300, 200), (100, 80)]
TARGETS = [(224, 224), (100, 150), (400, 300), (37, 301)]


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("target", TARGETS, ids=lambda s: f"to{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["synthetic", "photo"])
def test_jpeg_resize_matches_pillow_bilinear(source: tuple[int, int], target: tuple[int, int],
                                             kind: str) -> None:
    width, height = source
    rng = np.random.default_rng(width + height)
    image = synthetic_image(rng, width, height) if kind == "synthetic" else photo_like(*source)
    data = encoded(image, quality=90)
    out = decode(data, "rgb8", target)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (3, *target) and out.dtype == torch.uint8
    assert mean_error(out, pillow_reference(data, target)) < MAX_MEAN_ERROR


def test_no_resize_is_exact_full_decode() -> None:
    data = encoded(photo_like(320, 240), quality=85)
    out = decode(data)
    assert isinstance(out, torch.Tensor)
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert np.array_equal(out.permute(1, 2, 0).numpy(), expected)


def test_pil_mode_returns_rgb_image_of_the_size() -> None:
    data = encoded(photo_like(500, 400))
    out = decode(data, "pil", (120, 160))
    assert isinstance(out, Image.Image)
    assert out.mode == "RGB" and out.size == (160, 120)
    reference = pillow_reference(data, (120, 160))
    assert np.abs(np.asarray(out, np.int16) - reference).mean() < MAX_MEAN_ERROR


def test_png_resize_matches_pillow_bilinear() -> None:
    data = encoded(photo_like(400, 300), "PNG")
    out = decode(data, "rgb8", (150, 200))
    assert isinstance(out, torch.Tensor)
    assert mean_error(out, pillow_reference(data, (150, 200))) < 1.0


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_rotated_jpeg_comes_out_upright(orientation: int) -> None:
    upright = Image.new("RGB", (60, 40), (0, 0, 255))
    upright.paste((255, 0, 0), (0, 0, 30, 40))  # left half red
    stored = {3: upright.rotate(180), 6: upright.rotate(90, expand=True),
              8: upright.rotate(-90, expand=True)}[orientation]
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encoded(stored, quality=95, exif=exif.tobytes())
    assert exif_orientation(data) == orientation
    for size in (None, (20, 30)):
        out = decode(data, "rgb8", size)
        assert isinstance(out, torch.Tensor)
        height, width = size or (40, 60)
        assert out.shape == (3, height, width)
        left, right = out[:, height // 2, 2], out[:, height // 2, width - 3]
        assert left[0] > 200 and left[2] < 60, "left half should be red"
        assert right[2] > 200 and right[0] < 60, "right half should be blue"


def test_jpeg_without_exif_reads_upright() -> None:
    assert exif_orientation(encoded(photo_like(50, 40))) == 1
    assert exif_orientation(b"\xff\xd8\xff\xe1\x00") == 1


def jpeg_with_app1(tiff: bytes) -> bytes:
    """A JPEG whose first segment is an APP1 Exif block holding `tiff`."""
    payload = b"Exif\x00\x00" + tiff
    segment = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    return b"\xff\xd8" + segment + encoded(photo_like(40, 30))[2:]


def ifd0(order: str, tag: int, kind: int, value: bytes) -> bytes:
    big = order == "MM"
    head = b"MM\x00*" if big else b"II*\x00"
    endian: Literal["big", "little"] = "big" if big else "little"
    entry = (tag.to_bytes(2, endian) + kind.to_bytes(2, endian) + (1).to_bytes(4, endian)
             + value)
    return head + (8).to_bytes(4, endian) + (1).to_bytes(2, endian) + entry + bytes(4)


def test_exif_orientation_reads_both_byte_orders() -> None:
    assert exif_orientation(jpeg_with_app1(ifd0("MM", 0x0112, 3, b"\x00\x06\x00\x00"))) == 6
    assert exif_orientation(jpeg_with_app1(ifd0("II", 0x0112, 3, b"\x08\x00\x00\x00"))) == 8
    data = jpeg_with_app1(ifd0("II", 0x0112, 3, b"\x03\x00\x00\x00"))
    assert exif_orientation(memoryview(data)) == 3
    assert exif_orientation(bytearray(data)) == 3


@pytest.mark.filterwarnings("ignore:Corrupt EXIF data")
def test_odd_exif_defers_to_pillow() -> None:
    odd = jpeg_with_app1(ifd0("II", 0x0112, 4, b"\x06\x00\x00\x00"))  # LONG, not SHORT
    assert exif_orientation(odd) == 0
    truncated = jpeg_with_app1(b"II*\x00" + (4000).to_bytes(4, "little"))
    assert exif_orientation(truncated) == 0
    for data in (odd, truncated):
        out = decode(data)
        assert isinstance(out, torch.Tensor) and out.shape[0] == 3


def alpha_png() -> bytes:
    rgba = Image.new("RGBA", (30, 20), (255, 0, 0, 0))
    rgba.paste((0, 255, 0, 255), (0, 0, 15, 20))
    return encoded(rgba, "PNG")


def odd_modes() -> dict[str, bytes]:
    gray = photo_like(64, 48).convert("L")
    sixteen = Image.fromarray((np.arange(48 * 64, dtype=np.uint16) * 20).reshape(48, 64))
    return {
        "png-rgba": alpha_png(),
        "png-la": encoded(gray.convert("LA"), "PNG"),
        "png-palette": encoded(photo_like(64, 48).convert("P"), "PNG"),
        "png-16bit": encoded(sixteen.convert("I;16"), "PNG"),
        "jpeg-gray": encoded(gray),
        "jpeg-cmyk": encoded(photo_like(64, 48).convert("CMYK")),
        "webp": encoded(photo_like(64, 48), "WEBP"),
        "bmp": encoded(photo_like(64, 48), "BMP"),
    }


@pytest.mark.parametrize("name", list(odd_modes()))
@pytest.mark.parametrize("size", [None, (24, 32)])
def test_every_mode_gives_three_uint8_channels(name: str, size: tuple[int, int] | None) -> None:
    data = odd_modes()[name]
    out = decode(data, "rgb8", size)
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.uint8 and out.shape[0] == 3
    assert tuple(out.shape[1:]) == (size or Image.open(io.BytesIO(data)).size[::-1])
    image = decode(data, "pil", size)
    assert isinstance(image, Image.Image) and image.mode == "RGB"


def test_alpha_is_composited_on_white() -> None:
    out = decode(alpha_png())
    assert isinstance(out, torch.Tensor)
    assert out[:, 10, 5].tolist() == [0, 255, 0]
    assert out[:, 10, 25].tolist() == [255, 255, 255]


def test_gray_jpeg_matches_pillow() -> None:
    data = odd_modes()["jpeg-gray"]
    out = decode(data)
    assert isinstance(out, torch.Tensor)
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert np.array_equal(out.permute(1, 2, 0).numpy(), expected)


def test_raw_returns_the_same_bytes() -> None:
    data = encoded(photo_like(40, 30))
    assert decode(data, "raw") is data
    with pytest.raises(ValueError, match="raw"):
        decode(data, "raw", (10, 10))


def test_pixels_shape_views_raw_rgb() -> None:
    pixels = np.random.default_rng(1).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    for data in (pixels.tobytes(), bytearray(pixels.tobytes()), pixels.data):
        out = decode(data, pixels_shape=(5, 7))
        assert isinstance(out, torch.Tensor)
        assert out.shape == (3, 5, 7) and out.dtype == torch.uint8
        assert np.array_equal(out.permute(1, 2, 0).numpy(), pixels)
        out.add_(0)  # writable: never aliases read-only input


def test_pixels_shape_shares_writable_buffers() -> None:
    buffer = bytearray(4 * 6 * 3)
    out = decode(buffer, pixels_shape=(4, 6))
    assert isinstance(out, torch.Tensor)
    buffer[0] = 9
    assert out[0, 0, 0] == 9


def test_pixels_shape_resizes_and_converts() -> None:
    pixels = np.asarray(photo_like(64, 48))
    out = decode(pixels.tobytes(), "rgb8", (24, 32), pixels_shape=(48, 64))
    assert isinstance(out, torch.Tensor) and out.shape == (3, 24, 32)
    reference = np.asarray(Image.fromarray(pixels).resize((32, 24), Image.Resampling.BILINEAR))
    assert mean_error(out, reference) < 1.0
    image = decode(pixels.tobytes(), "pil", pixels_shape=(48, 64))
    assert isinstance(image, Image.Image) and np.array_equal(np.asarray(image), pixels)


def test_pixels_shape_size_mismatch_is_clear() -> None:
    with pytest.raises(DecodeError, match="5x7 RGB needs 105"):
        decode(bytes(100), pixels_shape=(5, 7))


@pytest.mark.parametrize("data", [
    b"", b"not an image", b"\xff\xd8\xff\xe0garbage", b"\x89PNG\r\n\x1a\nbroken",
])
def test_corrupt_data_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError, match="cannot decode image"):
        decode(data, "rgb8", (8, 8))


def test_truncated_jpeg_raises_decode_error() -> None:
    data = encoded(photo_like(200, 150))
    with pytest.raises(DecodeError) as caught:
        decode(data[: len(data) // 2])
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("kwargs", [
    {"mode": "bgr"}, {"size": (0, 5)}, {"size": (5,)}, {"pixels_shape": (-1, 2)},
])
def test_bad_arguments_raise_value_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        decode(b"", **kwargs)  # type: ignore[arg-type]
