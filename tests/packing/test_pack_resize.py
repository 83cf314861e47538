"""Pack-time resizing as good as the readers': a JPEG is DCT-scaled only down to twice
the target, and the output size comes from the original image on every decode path."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from devtools.bench.pack_quality import Memory
from packer.core.record import Record, SourceItem
from packer.encode import EncodeOptions, encode_item
from packer.imaging.jpeg import load_rgb_fast
from packer.imaging.pillow import load_rgb_sized
from tests.helpers import jpeg_bytes, png_bytes


def encoded(data: bytes, options: EncodeOptions, name: str = "x.jpg") -> bytes:
    record = encode_item(SourceItem(0, name, "x", 0, Memory(data)), options)
    assert isinstance(record, Record), record
    return record.data


def detailed(width: int, height: int, seed: int = 0) -> Image.Image:
    """Fine detail at every scale (a blurred noise field plus edges), like a photo's."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(128, 60, (height // 4 + 1, width // 4 + 1, 3)).clip(0, 255)
    base = Image.fromarray(noise.astype(np.uint8)).resize((width, height),
                                                          Image.Resampling.BICUBIC)
    pixels = np.asarray(base).astype(np.int16)
    pixels[:, ::7] += 40  # thin vertical lines: detail a soft resize loses
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


@pytest.mark.parametrize("make", [jpeg_bytes, png_bytes])
def test_resize_keeps_the_size_the_original_gives(make: object) -> None:
    """1280x911 to a shorter side of 256 is round(1280 * 256 / 911) = 360 wide, also
    where the decode is DCT-scaled to 640x456 first (which would give 359)."""
    data = make(detailed(1280, 911))  # type: ignore[operator]
    out = Image.open(io.BytesIO(encoded(data, EncodeOptions(resize=256, codec="png"))))
    assert out.size == (360, 256)
    padded = encoded(data, EncodeOptions(size=(100, 100), fit="pad", codec="png"))
    assert Image.open(io.BytesIO(padded)).size == (100, 100)


def test_dct_scaling_stops_at_twice_the_target() -> None:
    data = jpeg_bytes(detailed(1600, 1200))
    fast = load_rgb_fast(data, (100, 100), "crop")
    assert fast is not None
    pixels, source = fast
    assert source == (1600, 1200)
    assert pixels.shape[:2] == (300, 400)  # 1/4: the 1/8 decode would be under 2 x 100
    image, original = load_rgb_sized(data, size=(100, 100), fit="crop")
    assert (image.size, original) == ((400, 300), (1600, 1200))


@pytest.mark.parametrize("options", [EncodeOptions(size=(96, 96), pixels=True),
                                     EncodeOptions(resize=96, codec="png")])
def test_pack_resize_is_within_a_tenth_of_pillow_bilinear(options: EncodeOptions) -> None:
    """Distance to a Lanczos resize of the full decode: ours at most 1.1x Pillow
    bilinear's (the DCT-scaled decode to the target itself was ~1.4x)."""
    ours, pillow = [], []
    for seed in range(3):
        data = jpeg_bytes(detailed(1536, 1024, seed), quality=95)
        full = Image.open(io.BytesIO(data)).convert("RGB")
        if options.pixels:
            got = np.frombuffer(encoded(data, options), np.uint8).reshape(96, 96, 3)
            box = (256.0, 0.0, 1280.0, 1024.0)  # the centre square
            out = (96, 96)
        else:
            got = np.asarray(Image.open(io.BytesIO(encoded(data, options))).convert("RGB"))
            box, out = (0.0, 0.0, 1536.0, 1024.0), (144, 96)
        best = np.asarray(full.resize(out, Image.Resampling.LANCZOS, box=box), np.float64)
        bilinear = np.asarray(full.resize(out, Image.Resampling.BILINEAR, box=box), np.float64)
        ours.append(np.abs(got - best).mean())
        pillow.append(np.abs(bilinear - best).mean())
    assert np.mean(ours) <= 1.1 * np.mean(pillow), (ours, pillow)
