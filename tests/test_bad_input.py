"""Bad inputs under both policies, and unusual but valid images.

skip: every bad input is listed in rejects.jsonl with its path and a reason, and the
index counts it. fail: the conversion stops with a message naming the file, exits
non-zero and leaves no index.json. The source is never modified.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import struct
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image, ImageOps

from packer import EncodeOptions, convert, formats
from packer.cli import main
from packer.convert import ConvertOptions
from packer.encode import encode_item
from packer.errors import BadInputError
from packer.index import INDEX_NAME, REJECTS_NAME, open_dataset
from packer.record import Reject, SourceItem
from packer.verify import verify
from tests.conftest import jpeg_bytes, png_bytes, random_image, tree_hashes

FORMATS = ("wds", "lmdb", "hdf5", "npy")
WORKERS0 = ConvertOptions(workers=0)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header declares a huge image."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
            + png_chunk(b"IDAT", zlib.compress(b"\0" * 16)) + png_chunk(b"IEND", b""))


def write_zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def write_truncated_jpeg(path: Path) -> None:
    data = jpeg_bytes(random_image(120, 90, seed=3))
    path.write_bytes(data[: len(data) // 2])


def write_text(path: Path) -> None:
    path.write_text("this is text, not a JPEG\n")


def write_bomb(path: Path) -> None:
    path.write_bytes(bomb_png())


def write_fifo(path: Path) -> None:
    os.mkfifo(path)  # opening it for reading would block forever


# name in class "b" -> (how to make it, a word the reject reason must contain)
BAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty.jpg": (write_zero_bytes, "zero bytes"),
    "truncated.jpg": (write_truncated_jpeg, "truncated"),
    "text.jpg": (write_text, "not an image"),
    "bomb.png": (write_bomb, "decompression bomb"),
    "fifo.jpg": (write_fifo, "unreadable"),
}


def make_good(root: Path) -> None:
    for i in range(3):
        (root / "a").mkdir(parents=True, exist_ok=True)
        (root / "a" / f"good{i}.jpg").write_bytes(jpeg_bytes(random_image(64, 48, seed=i)))
    (root / "b").mkdir(parents=True, exist_ok=True)
    (root / "b" / "good.jpg").write_bytes(jpeg_bytes(random_image(50, 70, seed=9)))
    # A PNG named .jpg is fine: accepted, its extension corrected.
    (root / "b" / "png_named.jpg").write_bytes(png_bytes(random_image(40, 40, seed=5)))


@pytest.fixture
def bad_src(tmp_path: Path) -> Path:
    root = tmp_path / "bad-src"
    make_good(root)
    for name, (write, _) in BAD.items():
        write(root / "b" / name)
    return root


def read_rejects(dst: Path) -> dict[str, str]:
    lines = (dst / REJECTS_NAME).read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    assert all(set(row) >= {"path", "reason"} for row in rows)
    return {Path(row["path"]).name: row["reason"] for row in rows}


@pytest.mark.parametrize("fmt", FORMATS)
def test_skip_lists_every_bad_input(bad_src: Path, tmp_path: Path, fmt: str) -> None:
    before = tree_hashes(bad_src)
    dst = tmp_path / "out"
    options = EncodeOptions(size=(24, 24)) if fmt == "npy" else EncodeOptions()
    index = convert(bad_src, dst, fmt, options, WORKERS0)
    assert tree_hashes(bad_src) == before
    rejects = read_rejects(dst)
    assert set(rejects) == set(BAD)
    for name, (_, reason) in BAD.items():
        assert reason in rejects[name], (name, rejects[name])
    assert index.num_rejected == len(BAD)
    assert index.num_samples == 5
    _, table = open_dataset(dst)
    keys = table.keys()
    assert "b/png_named" in keys
    report = verify(dst, bad_src)
    assert report.ok, report.problem


def test_skip_reports_on_the_command_line(bad_src: Path, tmp_path: Path) -> None:
    before = tree_hashes(bad_src)
    dst = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(bad_src), str(dst), "--to", "wds",
                                       "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert f"{len(BAD)} rejected inputs listed in" in result.stdout
    info = json.loads(CliRunner().invoke(main, ["info", str(dst), "--json"]).stdout)
    assert info["num_rejected"] == len(BAD)
    assert info["num_samples"] == 5
    assert tree_hashes(bad_src) == before


def test_png_named_jpg_gets_its_real_extension(bad_src: Path, tmp_path: Path) -> None:
    convert(bad_src, tmp_path / "wds", "wds", run=WORKERS0)
    with tarfile.open(tmp_path / "wds" / "shard-00000.tar") as tar:
        names = tar.getnames()
    assert "b/png_named.png" in names and "b/png_named.jpg" not in names
    convert(bad_src, tmp_path / "h5", "hdf5", run=WORKERS0)
    with h5py.File(tmp_path / "h5" / "data.h5") as h5:
        exts = dict(zip(h5["keys"].asstr()[:], h5["exts"].asstr()[:], strict=True))
    assert exts["b/png_named"] == "png" and exts["a/good0"] == "jpg"


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_fail_stops_without_index(tmp_path: Path, name: str, fmt: str) -> None:
    src = tmp_path / "src"
    make_good(src)
    BAD[name][0](src / "b" / name)
    before = tree_hashes(src)
    dst = tmp_path / "out"
    with pytest.raises(BadInputError, match=name.replace(".", r"\.")):
        convert(src, dst, fmt, run=ConvertOptions(workers=0, on_error="fail"))
    assert not (dst / INDEX_NAME).exists()
    assert tree_hashes(src) == before


@pytest.mark.parametrize("name", ["truncated.jpg", "empty.jpg"])
def test_fail_on_the_command_line(tmp_path: Path, name: str) -> None:
    src = tmp_path / "src"
    make_good(src)
    BAD[name][0](src / "b" / name)
    dst = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--to", "lmdb",
                                       "--on-error", "fail", "--workers", "1"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert name in result.stderr and "--on-error skip" in result.stderr
    assert "Traceback" not in result.output
    assert not (dst / INDEX_NAME).exists()
    info = CliRunner().invoke(main, ["info", str(dst)])
    assert info.exit_code == 1 and "did not finish" in info.stderr


def test_unreadable_file_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, where chmod 000 does not stop a read: refuse the open instead,
    # at both doors a reader may use (builtins.open and os.open), for this one path only.
    src = tmp_path / "src"
    make_good(src)
    locked = src / "b" / "locked.jpg"
    locked.write_bytes(jpeg_bytes(random_image(30, 30)))
    real_open, real_os_open = builtins.open, os.open

    def refuse(file: Any) -> None:
        if os.fspath(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        refuse(file)
        return real_open(file, *args, **kwargs)

    def guarded_os_open(file: Any, *args: Any, **kwargs: Any) -> int:
        refuse(file)
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    index = convert(src, tmp_path / "out", "wds", run=WORKERS0)
    rejects = read_rejects(tmp_path / "out")
    assert list(rejects) == ["locked.jpg"]
    assert "unreadable" in rejects["locked.jpg"] and "Permission denied" in rejects["locked.jpg"]
    assert index.num_rejected == 1
    with pytest.raises(BadInputError, match="locked"):
        convert(src, tmp_path / "out2", "wds", run=ConvertOptions(workers=0, on_error="fail"))


def test_pixel_limit_makes_a_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    make_good(src)
    (src / "b" / "big.png").write_bytes(png_bytes(random_image(120, 100)))  # 12000 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 8000)  # in-process only: workers=0
    for fmt, options in (("wds", EncodeOptions()), ("npy", EncodeOptions(size=(16, 16)))):
        index = convert(src, tmp_path / fmt, fmt, options, WORKERS0)
        rejects = read_rejects(tmp_path / fmt)
        assert list(rejects) == ["big.png"] and "decompression bomb" in rejects["big.png"]
        assert index.num_rejected == 1


def test_header_check_skips_the_decode(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_good(src)
    write_truncated_jpeg(src / "b" / "truncated.jpg")
    write_text(src / "b" / "text.jpg")
    header = convert(src, tmp_path / "h", "wds", EncodeOptions(check="header"), WORKERS0)
    assert set(read_rejects(tmp_path / "h")) == {"text.jpg"}  # its header is not an image
    assert header.num_samples == 6
    trusted = convert(src, tmp_path / "n", "wds", EncodeOptions(check="none"), WORKERS0)
    assert trusted.num_rejected == 0 and trusted.num_samples == 7


# ---------------------------------------------------------------- unusual but valid images


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


def test_exif_rotation_with_a_large_reduction(tmp_path: Path) -> None:
    """JPEG draft (DCT scaling) and EXIF rotation together still give an upright image."""
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    big = upright_test_image().resize((400, 800)).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    (src / "x" / "big.jpg").write_bytes(jpeg_bytes(big, exif=exif.tobytes()))
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
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    big = upright_test_image().resize((400, 800)).transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    (src / "x" / "big.jpg").write_bytes(jpeg_bytes(big, exif=exif.tobytes()))
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
    with tarfile.open(tmp_path / "out" / "shard-00000.tar") as tar:
        assert tar.getnames() == ["a/cam.jpg", "a/cam.cls"]


@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("cut", [1, 2, 10, 300, 2000])
def test_truncated_jpeg_is_rejected_wherever_it_ends(tmp_path: Path, progressive: bool,
                                                     cut: int) -> None:
    data = jpeg_bytes(random_image(300, 200, seed=1), progressive=progressive)
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[:-cut])
    item = SourceItem(0, str(path), "cut", 0)
    for options in (EncodeOptions(), EncodeOptions(resize=64),
                    EncodeOptions(size=(32, 32), pixels=True)):
        result = encode_item(item, options)
        assert isinstance(result, Reject), (options, cut)
        assert "truncated" in result.reason or "corrupt" in result.reason, result.reason


def test_an_lmdb_key_too_long_is_a_rejected_input(tmp_path: Path) -> None:
    """LMDB keys hold at most 511 bytes: that one sample is rejected, the rest packed."""
    src = tmp_path / "src"
    deep = src / "cls" / ("a" * 200) / ("b" * 200) / ("c" * 200)
    deep.mkdir(parents=True)
    image = jpeg_bytes(random_image(16, 16))
    (deep / "long.jpg").write_bytes(image)
    (src / "cls" / "short.jpg").write_bytes(image)
    (src / "cls" / "zz.jpg").write_bytes(image)
    index = convert(src, tmp_path / "out", "lmdb", run=ConvertOptions(workers=0))
    assert index.num_samples == 2 and index.num_rejected == 1
    [line] = (tmp_path / "out" / REJECTS_NAME).read_text().splitlines()
    reject = json.loads(line)
    assert reject["path"].endswith("long.jpg") and "key too long for LMDB" in reject["reason"]
    assert verify(tmp_path / "out", src).ok
    assert convert(src, tmp_path / "wds", "wds").num_samples == 3  # tar takes any length
    with pytest.raises(BadInputError, match=r"long\.jpg: key too long for LMDB"):
        convert(src, tmp_path / "fail", "lmdb", run=ConvertOptions(on_error="fail"))
    assert not (tmp_path / "fail" / INDEX_NAME).exists()
