"""Bad inputs under both policies (unusual but valid images: test_unusual_images.py).

skip: every bad input is listed in rejects.jsonl with its path and a reason, and the
index counts it. fail: the conversion stops with a message naming the file, exits
non-zero and leaves no index.json. The source is never modified.
"""

from __future__ import annotations

import builtins
import json
import os
import struct
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from click.testing import CliRunner
from PIL import Image

from pack_cli import main
from packer import ConvertOptions, EncodeOptions, convert
from packer.api import verify
from packer.core.index import INDEX_NAME, REJECTS_NAME, open_dataset
from packer.core.record import Reject, SourceItem
from packer.encode import encode_item
from packer.errors import BadInputError
from tests.helpers import jpeg_bytes, png_bytes, random_image, tree_hashes

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
    names = []
    for shard in sorted((tmp_path / "wds").glob("*.tar")):
        with tarfile.open(shard) as tar:
            names += tar.getnames()
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
