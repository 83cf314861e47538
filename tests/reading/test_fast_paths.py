"""The speed paths keep the slow paths' meaning: tar headers, JPEG checks, tables, files."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from packer import ConvertOptions, convert
from packer.api import verify
from packer.conversion.executors import map_ordered, map_ordered_adaptive
from packer.core.index import TableBuilder, open_dataset
from packer.core.record import Record, Reject, SourceItem
from packer.encode import EncodeOptions, encode_item, read_input, rgb_pixels
from packer.formats import _hdf5_writer
from packer.formats._tar import member_header, pax_member_header
from packer.imaging.jpeg import decodes, load_rgb_fast
from packer.imaging.pillow import Fit, fit_image, load_rgb
from packer.storage.files import file_problem, sha256_file
from packer.storage.filestream import ShardFile
from packer.testing import make_sample_folder, synthetic_image


def jpeg_bytes(width: int = 160, height: int = 120, **save: object) -> bytes:
    out = io.BytesIO()
    image = synthetic_image(np.random.default_rng(width * height), width, height)
    image.save(out, "JPEG", quality=90, **save)
    return out.getvalue()


@pytest.mark.parametrize("name", ["a.jpg", "class_0/img_000001.jpg", "x" * 100, "x" * 101,
                                  "naïve.jpg", "k%2Ey.cls", "", "tab\tname.png"])
@pytest.mark.parametrize("size", [0, 1, 511, 512, 20_000, 8**11 - 1, 8**11])
def test_ustar_header_is_byte_identical_to_tarfile(name: str, size: int) -> None:
    assert member_header(name, size) == pax_member_header(name, size)


def test_tar_headers_read_back_with_tarfile(tmp_path: Path) -> None:
    path = tmp_path / "x.tar"
    data = b"abc" * 300
    with open(path, "wb") as handle:
        handle.write(member_header("k/one.jpg", len(data)) + data + bytes(-len(data) % 512))
        handle.write(bytes(1024))
    with tarfile.open(path) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.size, member.mtime, member.mode) == ("k/one.jpg", 900, 0, 0o644)
        assert tar.extractfile(member).read() == data  # type: ignore[union-attr]


def test_jpeg_check_accepts_whole_files_and_refuses_truncated_ones() -> None:
    data = jpeg_bytes()
    assert decodes(data)
    for cut in (len(data) // 3, len(data) // 2, len(data) - 2):
        assert not decodes(data[:cut])


@pytest.mark.parametrize("cut", [0.3, 0.6, 0.95])
def test_truncated_jpeg_is_rejected_as_truncated(tmp_path: Path, cut: float) -> None:
    data = jpeg_bytes(400, 300, progressive=cut > 0.5)
    path = tmp_path / "t.jpg"
    path.write_bytes(data[: int(len(data) * cut)])
    result = encode_item(SourceItem(0, str(path), "t", 0), EncodeOptions())
    assert isinstance(result, Reject)
    assert result.reason.startswith("truncated")


def test_cmyk_and_gray_jpegs_still_pass_through(tmp_path: Path) -> None:
    rgb = Image.open(io.BytesIO(jpeg_bytes()))
    for mode in ("CMYK", "L"):
        out = io.BytesIO()
        rgb.convert(mode).save(out, "JPEG")
        path = tmp_path / f"{mode}.jpg"
        path.write_bytes(out.getvalue())
        result = encode_item(SourceItem(0, str(path), mode, 0), EncodeOptions())
        assert isinstance(result, Record) and result.data == out.getvalue()
        assert result.ext == "jpg"


def pillow_fit(data: bytes, size: tuple[int, int], fit: Fit) -> np.ndarray:
    """The reference: Pillow decodes (EXIF applied), Pillow's BILINEAR fits."""
    return np.asarray(fit_image(load_rgb(data, size=size, fit=fit), size, fit)).astype(int)


def ours(data: bytes, size: tuple[int, int], fit: Fit) -> np.ndarray:
    return np.frombuffer(rgb_pixels(data, size, fit), np.uint8).reshape(*size, 3).astype(int)


@pytest.mark.parametrize("fit", ["crop", "stretch", "pad"])
@pytest.mark.parametrize("source", [(400, 300), (1000, 700), (150, 90)])  # full, 1/2 DCT, up
def test_fast_pixels_match_pillow_for_upright_jpegs(fit: Fit, source: tuple[int, int]) -> None:
    data = jpeg_bytes(*source)
    assert load_rgb_fast(data, (96, 128), fit) is not None
    error = np.abs(ours(data, (96, 128), fit) - pillow_fit(data, (96, 128), fit))
    # DCT scaling and the crop box rounded to whole pixels differ from Pillow a little;
    # a wrong crop, stretch or pad would differ by tens of levels
    assert error.mean() < 3


def test_pad_leaves_black_bars() -> None:
    pixels = ours(jpeg_bytes(400, 100), (100, 100), "pad")
    assert pixels[:37].max() == 0 and pixels[-37:].max() == 0 and pixels[38:62].min() < 255
    assert pixels[38:62].max() > 0


def test_exif_rotated_jpegs_take_the_pillow_path() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90
    data = jpeg_bytes(200, 100, exif=exif.tobytes())
    assert load_rgb_fast(data, (50, 50), "crop") is None
    upright = pillow_fit(data, (40, 20), "stretch")
    assert upright.shape == (40, 20, 3)
    assert np.abs(ours(data, (40, 20), "stretch") - upright).mean() < 1
    exif[0x0112] = 1
    assert load_rgb_fast(jpeg_bytes(200, 100, exif=exif.tobytes()), (50, 50), "crop") is not None


def test_table_builder_keeps_order_across_blocks() -> None:
    first = TableBuilder()
    for i in range(5):
        first.add(f"k{i}", i, i * 10, i + 1, bytes([i]) * 16)
    builder = TableBuilder()
    builder.extend(first.build())
    builder.add("last-é", 9, 99, 7, b"\xff" * 16)
    table = builder.build()
    assert len(builder) == 6 and table.keys() == ["k0", "k1", "k2", "k3", "k4", "last-é"]
    assert table.labels.tolist() == [0, 1, 2, 3, 4, 9]
    assert table.offsets.tolist() == [0, 10, 20, 30, 40, 99]
    assert table.digest(5) == b"\xff" * 16 and table.digest(2) == bytes([2]) * 16
    with pytest.raises(ValueError):
        builder.add("bad", 0, 0, 0, b"short")


def test_read_input_reads_whole_files(tmp_path: Path) -> None:
    for size in (0, 1, 4096, 300_000):
        path = tmp_path / f"f{size}"
        path.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        assert read_input(str(path)) == path.read_bytes()


def test_threads_keep_order_and_bound_the_window() -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def work(task: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.001 * (task % 3))
        with lock:
            running -= 1
        return task * 2

    submitted = 0

    def tasks() -> object:
        nonlocal submitted
        for i in range(200):
            submitted += 1
            yield i

    results = []
    for result in map_ordered(work, tasks(), workers=3, window=6):  # type: ignore[arg-type]
        results.append(result)
        assert submitted - len(results) <= 6
    assert results == [i * 2 for i in range(200)] and most <= 3


@pytest.mark.parametrize(("slow", "switch_after"), [((), None), ((3,), None),
                                                    ((3, 5), 5), ((2, 3, 4), 3)])
def test_adaptive_map_goes_to_threads_after_two_slow_tasks_in_four(
        slow: tuple[int, ...], switch_after: int | None) -> None:
    """Slow tasks advance a fake clock past `fast_s` (others leave it): the switch depends on
    which tasks are slow, never on how long they took on this machine."""
    where: list[bool] = []
    caller = threading.current_thread()
    now = [0.0]

    def work(task: int) -> int:
        where.append(threading.current_thread() is caller)
        now[0] += 0.02 if task in slow else 0.0
        return task * 2

    results = list(map_ordered_adaptive(work, range(12), workers=2, fast_s=0.01,
                                        clock=lambda: now[0]))
    assert results == [task * 2 for task in range(12)]
    inline = 12 if switch_after is None else switch_after + 1
    assert where == [True] * inline + [False] * (12 - inline)


def test_shard_file_hashes_what_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.bin"
    shard = ShardFile(path, start=100)
    pieces = [bytes([i % 256]) * (i * 997) for i in range(1, 300)]
    for i in range(0, len(pieces), 7):
        shard.write(pieces[i : i + 7])
    shard.close()
    body = b"".join(pieces)
    assert path.read_bytes() == bytes(100) + body
    assert shard.hexdigest() == hashlib.sha256(body).hexdigest()
    assert sha256_file(path) == hashlib.sha256(bytes(100) + body).hexdigest()


def test_hdf5_falls_back_when_the_blob_moves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    src = make_sample_folder(tmp_path / "src", count=12, classes=2)
    real = _hdf5_writer.build_layout
    calls = []

    def shifted(*args: object, **kwargs: object) -> int | None:
        offset = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(offset)
        return None if offset is None else (offset + 4096 if len(calls) == 1 else offset)

    monkeypatch.setattr(_hdf5_writer, "build_layout", shifted)
    convert(src, tmp_path / "h5", "hdf5", run=ConvertOptions(workers=0))
    assert verify(tmp_path / "h5", src).ok
    _, table = open_dataset(tmp_path / "h5")
    assert len(table) == 12


@pytest.mark.parametrize("with_reject", [False, True])
def test_npy_streamed_hash_matches_the_file(tmp_path: Path, with_reject: bool) -> None:
    src = make_sample_folder(tmp_path / "src", count=9, classes=3)
    if with_reject:
        (src / "class_00" / "broken.jpg").write_bytes(jpeg_bytes()[:200])
    index = convert(src, tmp_path / "n", "npy", EncodeOptions(size=(24, 32)),
                    ConvertOptions(workers=2))
    assert index.num_samples == 9 and index.num_rejected == int(with_reject)
    path = tmp_path / "n" / "images.npy"
    shard = index.shards[0]
    assert file_problem(path, shard.sha256, shard.pieces) is None
    data = path.read_bytes()
    assert shard.pieces == ((128, hashlib.sha256(data[:128]).hexdigest()),
                            (len(data) - 128, hashlib.sha256(data[128:]).hexdigest()))
    assert np.load(tmp_path / "n" / "images.npy").shape == (9, 24, 32, 3)
