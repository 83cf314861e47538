"""Unusual but valid images (modes, transparency, EXIF rotation, animation, camera
MPO) come out right: passed through, resized, or as npy pixels."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from packer import ConvertOptions, EncodeOptions, convert, formats
from packer.core.index import REJECTS_NAME, open_dataset
from tests.helpers import jpeg_bytes, png_bytes, random_image, tree_hashes

WORKERS0 = ConvertOptions(workers=0)


def upright_test_image() -> Image.Image:
    """Portrait (w 80, h 160): top half red, bottom half blue."""
    pixels = np.zeros((160, 80, 3), np.uint8)
    pixels[:80, :, 0] = 255
    pixels[80:, :, 2] = 255
    return Image.fromarray(pixels, "RGB")


def exif_rotated_jpeg() -> bytes:
    """Stored landscape (160x80) with EXIF orientation 6: displayed as the portrait above."""
    stored = upright_test_image().transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = jpeg_bytes(stored, quality=95, exif=exif.tobytes())
    with Image.open(io.BytesIO(data)) as check:  # the fixture itself is right
        assert check.size == (160, 80)
        assert ImageOps.exif_transpose(check).size == (80, 160)
    return data


def animated_gif() -> bytes:
    frames = [random_image(48, 40, seed=s).convert("P") for s in range(3)]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=50,
                   loop=0)
    return out.getvalue()


def unusual_images() -> dict[str, bytes]:
    base = random_image(72, 56, seed=11)
    gradient = (np.arange(56 * 72, dtype=np.uint32).reshape(56, 72) * 16).astype(np.uint16)
    palette = base.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    webp = io.BytesIO()
    base.convert("RGBA").save(webp, format="WEBP")
    tiff = io.BytesIO()
    base.save(tiff, format="TIFF")
    bmp = io.BytesIO()
    base.convert("1").save(bmp, format="BMP")
    return {
        "cmyk.jpg": jpeg_bytes(base.convert("CMYK")),
        "gray16.png": png_bytes(Image.fromarray(gradient)),
        "palette_alpha.png": png_bytes(palette, transparency=0),
        "exif6.jpg": exif_rotated_jpeg(),
        "animated.gif": animated_gif(),
        "gray_alpha.png": png_bytes(base.convert("LA")),
        "rgba.webp": webp.getvalue(),
        "plain.tif": tiff.getvalue(),
        "bilevel.bmp": bmp.getvalue(),
    }


@pytest.fixture(scope="module")
def unusual_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unusual") / "src"
    (root / "x").mkdir(parents=True)
    for name, data in unusual_images().items():
        (root / "x" / name).write_bytes(data)
    with Image.open(root / "x" / "gray16.png") as check:
        assert check.mode.startswith("I")
    with Image.open(root / "x" / "animated.gif") as check:
        assert getattr(check, "n_frames", 1) == 3
    with Image.open(root / "x" / "cmyk.jpg") as check:
        assert check.mode == "CMYK"
    return root


def decoded(dst: Path) -> dict[str, Image.Image]:
    index, table = open_dataset(dst)
    reader = formats.load(index.format).open_reader(dst, index, table)
    try:
        images = {}
        for i in range(len(table)):
            with Image.open(io.BytesIO(reader.read(i))) as image:
                images[table.key(i)] = image.convert("RGB")
        return images
    finally:
        reader.close()


def test_unusual_images_pass_through(unusual_src: Path, tmp_path: Path) -> None:
    index = convert(unusual_src, tmp_path / "out", "wds", run=WORKERS0)
    assert index.num_rejected == 0 and index.num_samples == len(unusual_images())


@pytest.mark.parametrize("codec", ["jpeg", "png"])
def test_unusual_images_resize(unusual_src: Path, tmp_path: Path, codec: str) -> None:
    before = tree_hashes(unusual_src)
    dst = tmp_path / "out"
    options = EncodeOptions(resize=20, codec=codec)  # type: ignore[arg-type]
    index = convert(unusual_src, dst, "lmdb", options, WORKERS0)
    assert index.num_rejected == 0, (dst / REJECTS_NAME).read_text()
    images = decoded(dst)
    assert len(images) == len(unusual_images())
    for key, image in images.items():
        assert min(image.size) == 20, key
    # EXIF orientation applied: the portrait stays a portrait, red on top.
    upright = images["x/exif6"]
    assert upright.size == (20, 40)
    pixels = np.asarray(upright).astype(int)
    assert pixels[2, 10, 0] > 200 and pixels[2, 10, 2] < 60
    assert pixels[37, 10, 2] > 200 and pixels[37, 10, 0] < 60
    assert tree_hashes(unusual_src) == before


def test_unusual_images_npy(unusual_src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    index = convert(unusual_src, dst, "npy", EncodeOptions(size=(40, 20), fit="stretch"),
                    WORKERS0)
    assert index.num_rejected == 0, (dst / REJECTS_NAME).read_text()
    images = np.load(dst / "images.npy", mmap_mode="r")
    assert images.shape == (len(unusual_images()), 40, 20, 3)
    _, table = open_dataset(dst)
    upright = images[table.keys().index("x/exif6")].astype(int)
    assert upright[2, 10, 0] > 200 and upright[2, 10, 2] < 60  # red on top
    assert upright[37, 10, 2] > 200 and upright[37, 10, 0] < 60  # blue below
    alpha = images[table.keys().index("x/palette_alpha")]
    assert alpha.dtype == np.uint8


def large_rotated_source(tmp_path: Path) -> Path:
    """A folder with one 800x400 JPEG stored sideways, EXIF saying rotate 90 (upright:
    400x800, red on top)."""
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    big = upright_test_image().resize((400, 800)).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    (src / "x" / "big.jpg").write_bytes(jpeg_bytes(big, exif=exif.tobytes()))
    return src


def test_exif_rotation_with_a_large_reduction(tmp_path: Path) -> None:
    """JPEG draft (DCT scaling) and EXIF rotation together still give an upright image."""
    src = large_rotated_source(tmp_path)
    convert(src, tmp_path / "out", "wds", EncodeOptions(resize=50), WORKERS0)
    image = decoded(tmp_path / "out")["x/big"]
    assert image.size == (50, 100)
    assert np.asarray(image)[5, 25, 0] > 200


def reference_rgb(image: Image.Image) -> Image.Image:
    """What the packer promises, built with plain Pillow: upright, RGB, alpha on white,
    16-bit scaled to 8."""
    image = ImageOps.exif_transpose(image)
    if image.mode.startswith("I"):
        array = np.asarray(image).astype(np.float64)
        array = array / 256 if array.max() > 255 else array
        return Image.fromarray(array.astype(np.uint8)).convert("RGB")
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def test_unusual_images_keep_their_colours_in_npy(unusual_src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    convert(unusual_src, dst, "npy", EncodeOptions(size=(28, 36), fit="stretch"), WORKERS0)
    images = np.load(dst / "images.npy", mmap_mode="r")
    _, table = open_dataset(dst)
    for i, key in enumerate(table.keys()):
        path = next((unusual_src / "x").glob(key.split("/")[1] + ".*"))
        with Image.open(path) as original:
            want = reference_rgb(original).resize((36, 28), Image.Resampling.BILINEAR)
        error = np.abs(images[i].astype(int) - np.asarray(want).astype(int)).mean()
        assert error < 12, (key, error)


def test_exif_rotation_with_a_large_reduction_in_npy(tmp_path: Path) -> None:
    src = large_rotated_source(tmp_path)
    convert(src, tmp_path / "out", "npy", EncodeOptions(size=(40, 40), fit="stretch"), WORKERS0)
    pixels = np.load(tmp_path / "out" / "images.npy")[0].astype(int)
    assert pixels[3, 20, 0] > 200 and pixels[3, 20, 2] < 60  # red on top
    assert pixels[36, 20, 2] > 200 and pixels[36, 20, 0] < 60  # blue below


def mpo_bytes() -> bytes:
    """A multi-picture JPEG, as many cameras write: Pillow calls its format MPO."""
    out = io.BytesIO()
    first, second = random_image(64, 48, seed=1), random_image(64, 48, seed=2)
    first.save(out, format="MPO", save_all=True, append_images=[second])
    return out.getvalue()


@pytest.mark.parametrize("check", ["decode", "header"])  # MPO: a camera JPEG
def test_camera_mpo_jpeg_is_stored_as_jpg(tmp_path: Path, check: Any) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "cam.jpg").write_bytes(mpo_bytes())
    with Image.open(src / "a" / "cam.jpg") as check_image:
        assert check_image.format == "MPO"
    convert(src, tmp_path / "out", "wds", EncodeOptions(check=check), WORKERS0)
    with tarfile.open(tmp_path / "out" / "out-00000.tar") as tar:
        assert tar.getnames() == ["a/cam.jpg", "a/cam.cls"]
