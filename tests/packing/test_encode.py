"""Encoding options: resize, fixed size with fit, codecs and quality; pure helpers."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image
from webdataset.tariterators import base_plus_ext

from packer import ConvertOptions, EncodeOptions, convert, formats
from packer.conversion.job import effective_options
from packer.core.index import open_dataset
from packer.core.record import Record, Reject, SourceItem
from packer.encode import digest_of, encode_item
from packer.formats._npy import HEADER_BYTES, npy_header
from packer.formats._wds import encode_key
from tests.helpers import jpeg_bytes, png_bytes, random_image

WORKERS0 = ConvertOptions(workers=0)


def three_bands(width: int = 300, height: int = 100) -> Image.Image:
    """Left third red, middle green, right third blue."""
    pixels = np.zeros((height, width, 3), np.uint8)
    third = width // 3
    pixels[:, :third, 0] = 255
    pixels[:, third : 2 * third, 1] = 255
    pixels[:, 2 * third :, 2] = 255
    return Image.fromarray(pixels, "RGB")


def encode_one(tmp_path: Path, data: bytes, options: EncodeOptions, name: str = "x.png") -> Record:
    path = tmp_path / name
    path.write_bytes(data)
    result = encode_item(SourceItem(0, str(path), "k", 0), options)
    assert isinstance(result, Record), result
    return result


def opened(record: Record) -> Image.Image:
    image = Image.open(io.BytesIO(record.data))
    image.load()
    return image


@pytest.mark.parametrize(("size", "resize", "upscale", "want"), [
    ((120, 60), 40, False, (80, 40)),
    ((60, 120), 40, False, (40, 80)),
    ((301, 97), 50, False, (155, 50)),
    ((30, 20), 40, False, (30, 20)),  # smaller than asked: kept, never enlarged
    ((30, 20), 40, True, (60, 40)),  # unless --upscale
    ((40, 40), 40, False, (40, 40)),
])
def test_resize_keeps_aspect_and_never_upscales(tmp_path: Path, size: tuple[int, int],
                                                resize: int, upscale: bool,
                                                want: tuple[int, int]) -> None:
    for data in (png_bytes(random_image(*size)), jpeg_bytes(random_image(*size))):
        record = encode_one(tmp_path, data, EncodeOptions(resize=resize, upscale=upscale))
        assert opened(record).size == want
        assert record.ext == "jpg" and opened(record).format == "JPEG"


def test_resize_of_a_large_jpeg_keeps_aspect(tmp_path: Path) -> None:
    # A big reduction goes through JPEG draft (DCT scaling) first; the aspect must survive.
    record = encode_one(tmp_path, jpeg_bytes(random_image(1000, 333)), EncodeOptions(resize=50),
                        "big.jpg")
    width, height = opened(record).size
    assert height == 50 and abs(width - 150) <= 1


@pytest.mark.parametrize("fit", ["stretch", "crop", "pad"])
@pytest.mark.parametrize("size", [(30, 50), (50, 30), (64, 64), (200, 120)])
def test_size_gives_exactly_h_by_w(tmp_path: Path, fit: Any, size: tuple[int, int]) -> None:
    data = png_bytes(three_bands())
    record = encode_one(tmp_path, data, EncodeOptions(size=size, fit=fit, codec="png"))
    height, width = size
    assert opened(record).size == (width, height)
    pixels = encode_one(tmp_path, data, EncodeOptions(size=size, fit=fit, pixels=True))
    assert len(pixels.data) == height * width * 3 and pixels.ext == "rgb"


def test_fit_modes_treat_the_aspect_as_documented(tmp_path: Path) -> None:
    data = png_bytes(three_bands(300, 100))

    def pixels(fit: Any) -> np.ndarray:
        record = encode_one(tmp_path, data, EncodeOptions(size=(60, 60), fit=fit, pixels=True))
        return np.frombuffer(record.data, np.uint8).reshape(60, 60, 3).astype(int)

    crop = pixels("crop")  # the centre third: all green
    assert crop[:, :, 1].min() > 200 and crop[:, :, 0].max() < 60 and crop[:, :, 2].max() < 60
    stretch = pixels("stretch")  # all three bands, squeezed
    assert stretch[30, 5, 0] > 200 and stretch[30, 30, 1] > 200 and stretch[30, 55, 2] > 200
    pad = pixels("pad")  # letterboxed: black bars above and below
    assert pad[:15].max() == 0 and pad[-15:].max() == 0
    assert pad[30, 5, 0] > 200 and pad[30, 55, 2] > 200


@pytest.mark.parametrize(("codec", "fmt"), [("jpeg", "JPEG"), ("png", "PNG"),
                                            ("webp", "WEBP")])
def test_codecs(tmp_path: Path, codec: Any, fmt: str) -> None:
    record = encode_one(tmp_path, png_bytes(random_image(90, 70)),
                        EncodeOptions(codec=codec, resize=50))
    assert opened(record).format == fmt
    assert record.ext == {"jpeg": "jpg", "png": "png", "webp": "webp"}[codec]
    assert record.digest == digest_of(record.data)


@pytest.mark.parametrize("codec", ["jpeg", "webp"])
def test_quality_changes_lossy_codecs(tmp_path: Path, codec: Any) -> None:
    data = png_bytes(random_image(120, 90))
    low = encode_one(tmp_path, data, EncodeOptions(codec=codec, quality=20))
    high = encode_one(tmp_path, data, EncodeOptions(codec=codec, quality=95))
    assert len(low.data) < len(high.data)
    original = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    error_low = np.abs(np.asarray(opened(low).convert("RGB")).astype(int) - original).mean()
    error_high = np.abs(np.asarray(opened(high).convert("RGB")).astype(int) - original).mean()
    assert error_high < error_low


def test_png_reencode_is_lossless_without_resize(tmp_path: Path) -> None:
    image = random_image(50, 40)
    record = encode_one(tmp_path, jpeg_bytes(image), EncodeOptions(codec="png"), "x.jpg")
    want = np.asarray(Image.open(io.BytesIO(jpeg_bytes(image))).convert("RGB"))
    assert np.array_equal(np.asarray(opened(record)), want)


def test_reencoded_output_is_deterministic(src: Path, tmp_path: Path) -> None:
    options = EncodeOptions(resize=32, codec="webp", quality=70)
    convert(src, tmp_path / "a", "hdf5", options, ConvertOptions(workers=0))
    convert(src, tmp_path / "b", "hdf5", options, ConvertOptions(workers=2))
    assert (tmp_path / "a" / "data.h5").read_bytes() == (tmp_path / "b" / "data.h5").read_bytes()
    index, table = open_dataset(tmp_path / "a")
    assert index.encode["mode"] == "reencode" and index.encode["codec"] == "webp"
    reader = formats.load("hdf5").open_reader(tmp_path / "a", index, table)
    try:
        for i in range(len(table)):
            with Image.open(io.BytesIO(reader.read(i))) as image:
                assert image.format == "WEBP" and min(image.size) <= 32
    finally:
        reader.close()


def test_npy_default_and_given_size(src: Path) -> None:
    assert effective_options("npy", EncodeOptions()).size == (256, 256)
    assert effective_options("npy", EncodeOptions()).pixels
    assert effective_options("npy", EncodeOptions(size=(32, 48))).size == (32, 48)
    with pytest.raises(ValueError, match="--size"):
        effective_options("npy", EncodeOptions(resize=64))
    with pytest.raises(ValueError, match="--size"):
        effective_options("npy", EncodeOptions(codec="png"))
    with pytest.raises(ValueError, match="npy"):
        effective_options("wds", EncodeOptions(size=(8, 8), pixels=True))


def test_npy_pixels_match_a_plain_pillow_resize(tmp_path: Path) -> None:
    image = random_image(160, 120, seed=4)
    record = encode_one(tmp_path, png_bytes(image), EncodeOptions(size=(60, 80), fit="stretch",
                                                                  pixels=True))
    ours = np.frombuffer(record.data, np.uint8).reshape(60, 80, 3).astype(int)
    plain = np.asarray(image.resize((80, 60), Image.Resampling.BILINEAR)).astype(int)
    assert np.abs(ours - plain).mean() < 3


@pytest.mark.parametrize(("changes", "message"), [
    ({"quality": 0}, "quality"),
    ({"quality": 101}, "quality"),
    ({"resize": 0}, "resize"),
    ({"resize": 10, "size": (5, 5)}, "either"),
    ({"size": (0, 5)}, "size"),
    ({"fit": "squash"}, "fit"),
    ({"codec": "gif"}, "encode"),
    ({"check": "maybe"}, "check"),
    ({"pixels": True}, "fixed size"),
    ({"resize": 100_000, "upscale": True}, "resize 100000 makes images of 10,000,000,000"),
    ({"size": (20_000, 5_000)}, "size 20000x5000 makes .* decompression-bomb limit"),
])
def test_encode_options_are_validated(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncodeOptions(**changes)


def test_encode_item_never_raises(tmp_path: Path) -> None:
    missing = encode_item(SourceItem(3, str(tmp_path / "nope.jpg"), "nope", 0), EncodeOptions())
    assert isinstance(missing, Reject) and missing.position == 3
    folder = encode_item(SourceItem(4, str(tmp_path), "dir", 0), EncodeOptions(resize=8))
    assert isinstance(folder, Reject) and "folder" in folder.reason


# ---------------------------------------------------------------- property tests


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=4))
def test_npy_header_is_read_by_numpy(shape: list[int]) -> None:
    header = npy_header(tuple(shape))
    assert len(header) == HEADER_BYTES and header[-1:] == b"\n"
    stream = io.BytesIO(header)
    assert np.lib.format.read_magic(stream) == (1, 0)
    read_shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    assert read_shape == tuple(shape) and not fortran and dtype == np.uint8
    assert stream.tell() == HEADER_BYTES


def test_npy_header_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        npy_header(tuple([10**12] * 8))


def test_npy_header_with_data_loads(tmp_path: Path) -> None:
    pixels = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    path = tmp_path / "x.npy"
    path.write_bytes(npy_header(pixels.shape) + pixels.tobytes())
    assert np.array_equal(np.load(path, mmap_mode="r"), pixels)


KEY_TEXT = st.text(alphabet=st.characters(codec="utf-8",
                                          blacklist_characters="\0"), min_size=1, max_size=30)


@given(KEY_TEXT)
def test_wds_key_encoding_round_trips(key: str) -> None:
    encoded = encode_key(key)
    assert unquote(encoded) == key
    assert "." not in encoded


@given(st.lists(KEY_TEXT.filter(lambda s: "/" not in s), min_size=1, max_size=3),
       st.sampled_from(["jpg", "png", "webp"]))
def test_webdataset_splits_encoded_names_at_our_extension(parts: list[str], ext: str) -> None:
    # base_plus_ext is the split stock webdataset applies to member names.
    key = "/".join(parts)
    encoded = encode_key(key)
    assert base_plus_ext(f"{encoded}.{ext}") == (encoded, ext)
    assert base_plus_ext(f"{encoded}.cls") == (encoded, "cls")
    assert re.sub("%25", "%", encoded.replace("%2E", ".")) == key
