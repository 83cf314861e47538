"""The compiled cropped JPEG decode (packer/imaging/_cropjpeg.c) and its fallback.

Decoding only a box must give exactly the pixels of the full decode cut to that box, at
every DCT scale and for every JPEG layout libjpeg-turbo treats differently (chroma
subsampling, grayscale, progressive, restart intervals), boxes on the image's edges
included; bad data raises; without the extension decode_box gives the same pixels, and
the augmented samples are bit-identical either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import pytest
import torch
from PIL import Image

from packer.imaging import jpeg
from packer.imaging.crop_extension import CropDecode, CropExtension
from readers.augment import Augment, CenterCrop, RandomResizedCrop
from readers.decoding.crop_decode import decode_augmented
from tests.helpers import jpeg_bytes, random_image

cropjpeg = pytest.importorskip("packer.imaging._cropjpeg",
                               reason="the optional extension is not built here")


def use(monkeypatch: pytest.MonkeyPatch, decode: Callable[..., bytearray] | None) -> None:
    """decode_box takes `decode` (None: the full decode cut to the box) in this test."""
    chosen = CropExtension(cast(CropDecode | None, decode), "set by the test")
    monkeypatch.setattr(jpeg, "extension", lambda: chosen)


@pytest.fixture(autouse=True)
def extension_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with the extension in use, whatever the environment says."""
    use(monkeypatch, cropjpeg.decode_crop)


HEIGHT, WIDTH = 203, 317  # no side a multiple of an iMCU (8 or 16)
LAYOUTS = {
    "4:2:0": {"subsampling": "4:2:0"},
    "4:2:2": {"subsampling": "4:2:2"},
    "4:4:4": {"subsampling": "4:4:4"},
    "progressive": {"progressive": True},
    "restarts": {"restart_marker_blocks": 3},
}


def layouts() -> dict[str, bytes]:
    image = random_image(WIDTH, HEIGHT, seed=3)
    out = {name: jpeg_bytes(image, quality=85, **save) for name, save in LAYOUTS.items()}
    out["grayscale"] = jpeg_bytes(image.convert("L"), quality=85)
    return out


SAMPLES = layouts()


def boxes(height: int, width: int, seed: int) -> list[tuple[int, int, int, int]]:
    """(top, left, height, width): each corner and edge, whole rows and columns, single
    pixels, and random boxes."""
    fixed = [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1),
             (0, width - 5, height, 5), (height - 7, 0, 7, width), (0, 0, 9, 9),
             (height - 9, width - 9, 9, 9), (height // 3, width // 3, 1, width - width // 3)]
    rng = np.random.default_rng(seed)
    for _ in range(12):
        h, w = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        fixed.append((int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)),
                      h, w))
    return fixed


def crop(data: bytes, box: tuple[int, int, int, int], factor: int) -> np.ndarray:
    pixels = cropjpeg.decode_crop(data, *box, factor)
    return np.frombuffer(pixels, np.uint8).reshape(box[2], box[3], 3)


@pytest.mark.parametrize("factor", [1, 2, 4, 8])
@pytest.mark.parametrize("layout", sorted(SAMPLES))
def test_a_box_is_exactly_the_full_decode_cut(layout: str, factor: int) -> None:
    data = SAMPLES[layout]
    full = jpeg.decode_scaled(data, (HEIGHT, WIDTH), factor)
    assert full is not None
    for box in boxes(full.shape[0], full.shape[1], factor):
        top, left, height, width = box
        assert np.array_equal(crop(data, box, factor),
                              full[top:top + height, left:left + width]), (layout, box)


def test_grayscale_comes_back_as_rgb() -> None:
    pixels = crop(SAMPLES["grayscale"], (0, 0, HEIGHT, WIDTH), 1)
    assert np.array_equal(pixels[..., 0], pixels[..., 2])


def test_takes_any_buffer() -> None:
    data = SAMPLES["4:2:0"]
    expected = cropjpeg.decode_crop(data, 5, 6, 7, 8, 1)
    assert cropjpeg.decode_crop(memoryview(data), 5, 6, 7, 8, 1) == expected
    assert cropjpeg.decode_crop(bytearray(data), 5, 6, 7, 8, 1) == expected


@pytest.mark.parametrize(("data", "words"), [
    (SAMPLES["4:2:0"][:len(SAMPLES["4:2:0"]) // 2], "libjpeg: Premature end"),
    (b"\xff\xd8" + b"\x00" * 200, "libjpeg: "),
    (b"not a jpeg", "libjpeg: Not a JPEG file"),
])
def test_bad_data_raises_the_libjpeg_reason(data: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        cropjpeg.decode_crop(data, 0, 0, HEIGHT, WIDTH, 1)


def test_corrupt_entropy_data_raises() -> None:
    data = bytearray(SAMPLES["4:2:0"])
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff\x00" * 32  # marker-like garbage
    data[len(data) // 2 + 64:len(data) // 2 + 66] = b"\xff\xd0"   # a stray restart marker
    with pytest.raises(ValueError, match="libjpeg: "):
        cropjpeg.decode_crop(bytes(data), 0, 0, HEIGHT, WIDTH, 1)


@pytest.mark.parametrize(("box", "factor", "words"), [
    ((0, 0, HEIGHT + 1, WIDTH), 1, "outside the 203x317 image at 1/1"),
    ((0, 1, 1, WIDTH), 1, "outside"),
    ((0, 0, 0, 5), 1, "outside any JPEG"),
    ((-1, 0, 5, 5), 1, "outside any JPEG"),
    ((0, 0, 27, 40), 8, "outside the 26x40 image at 1/8"),
    ((0, 2**63 - 1, 1, 1), 1, "outside any JPEG"),  # the sum would overflow
    ((2**32 + 1, 0, 1, 1), 2, "outside any JPEG"),  # unsigned int would truncate it
    ((0, 0, 1, 1), 3, "scale_denom must be 1, 2, 4 or 8, not 3"),
])
def test_a_box_outside_the_image_is_refused(box: tuple[int, int, int, int], factor: int,
                                            words: str) -> None:
    with pytest.raises(ValueError, match=words):
        cropjpeg.decode_crop(SAMPLES["4:2:0"], *box, factor)


def test_cmyk_is_refused() -> None:
    data = jpeg_bytes(random_image(40, 30).convert("CMYK"))
    with pytest.raises(ValueError, match="colour space"):
        cropjpeg.decode_crop(data, 0, 0, 30, 40, 1)


@pytest.mark.parametrize("factor", [1, 4])
def test_decode_box_without_the_extension_gives_the_same_pixels(
        factor: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = SAMPLES["4:2:0"]
    box = (3, 10, 20, 30)
    with_extension = jpeg.decode_box(data, (HEIGHT, WIDTH), factor, box)
    use(monkeypatch, None)
    without = jpeg.decode_box(data, (HEIGHT, WIDTH), factor, box)
    assert with_extension is not None and without is not None
    assert np.array_equal(with_extension, without)


def test_a_truncated_file_fails_whichever_box_is_drawn() -> None:
    """A box above the truncation fails too: every row is read to the end."""
    data = SAMPLES["4:2:0"][:len(SAMPLES["4:2:0"]) * 3 // 4]
    with pytest.raises(ValueError, match="libjpeg: "):
        crop(data, (0, 0, 8, 8), 1)
    assert jpeg.decode_box(data, (HEIGHT, WIDTH), 1, (0, 0, 8, 8)) is None


def outcomes(data: bytes, augment: Augment, epochs: int) -> list[bytes | None]:
    """Each epoch's augmented pixels, or None where the decode raised."""
    out: list[bytes | None] = []
    for epoch in range(epochs):
        try:
            out.append(decode_augmented(data, augment, (0, epoch, 0)).numpy().tobytes())
        except Exception:  # DecodeError or Pillow's own: either is an outcome
            out.append(None)
    return out


def test_damage_below_the_box_fails_as_the_full_decode_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: decoding stopped after the box, so a file damaged below it decoded
    in some epochs and failed in others (or gave other pixels), unlike the full decode.
    Each damaged copy must give the same outcome and pixels with and without it."""
    clean = jpeg_bytes(random_image(800, 600, 0), quality=90)
    augment = RandomResizedCrop(64)
    damaged = []
    for back in range(100, 30_000, 2_991):
        for marker in (0xC4, 0xD0):
            copy = bytearray(clean)
            copy[len(clean) - back:len(clean) - back + 2] = bytes((0xFF, marker))
            damaged.append(bytes(copy))
    calls: list[int] = []

    def counted(data: bytes, *box_and_factor: int) -> bytearray:
        calls.append(1)
        return cropjpeg.decode_crop(data, *box_and_factor)

    use(monkeypatch, counted)
    with_it = [outcomes(data, augment, 6) for data in damaged]
    use(monkeypatch, None)
    without = [outcomes(data, augment, 6) for data in damaged]
    assert len(calls) == 6 * len(damaged), "the extension was not what decoded"
    assert with_it == without
    assert any(None in runs for runs in without), "no damaged copy failed: test too weak"


def test_bad_data_is_declined_not_raised() -> None:
    assert jpeg.decode_box(b"\xff\xd8 broken \xff\xd9", (HEIGHT, WIDTH), 1, (0, 0, 8, 8)) is None


def big_samples() -> list[bytes]:
    """Large enough that the crops take every DCT scale."""
    return [jpeg_bytes(random_image(w, h, seed), quality=85)
            for seed, (h, w) in enumerate([(HEIGHT, WIDTH), (700, 900), (1300, 1700)])]


@pytest.mark.parametrize("augment", [RandomResizedCrop(48), RandomResizedCrop(160),
                                     CenterCrop(40, resize=46), CenterCrop(300)],
                         ids=["rrc48", "rrc160", "center40", "center300"])
def test_augmented_samples_are_bit_identical_without_the_extension(
        augment: Augment, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = big_samples()
    where = [(7, epoch, index) for epoch in range(3) for index in range(len(samples))]
    ours = [decode_augmented(samples[i], augment, (s, e, i)) for s, e, i in where]
    use(monkeypatch, None)
    for (seed, epoch, index), got in zip(where, ours, strict=True):
        assert torch.equal(got, decode_augmented(samples[index], augment,
                                                 (seed, epoch, index)))


def test_pillow_still_decodes_what_the_fast_path_declines() -> None:
    """A CMYK JPEG never reaches the extension: Pillow decodes it, as before."""
    data = jpeg_bytes(Image.new("CMYK", (64, 48), (0, 50, 100, 0)))
    out = decode_augmented(data, RandomResizedCrop(16), (0, 0, 0))
    assert out.shape == (3, 16, 16)


def test_only_a_part_of_the_image_takes_the_cropped_decode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []

    def spy(data: bytes, *box_and_factor: int) -> bytearray:
        calls.append(box_and_factor)
        return cropjpeg.decode_crop(data, *box_and_factor)

    use(monkeypatch, spy)
    data = SAMPLES["4:2:0"]
    whole = jpeg.decode_box(data, (HEIGHT, WIDTH), 2, (0, 0, 102, 159))
    part = jpeg.decode_box(data, (HEIGHT, WIDTH), 2, (1, 0, 101, 159))
    assert whole is not None and part is not None
    assert np.array_equal(whole[1:], part)
    assert calls == [(1, 0, 101, 159, 2)]
