"""Every JPEG variant (cjpeg's, lossless, 12/16-bit, lying headers) and truncated and
garbled copies of each, in a folder of ordinary images: no conversion, report or reader
crashes; a JPEG Pillow decodes is packed and reads back as Pillow decodes it, one it does
not is a reject naming the file (invariant 13).

Whatever could kill the process runs in a child process (tests/jpeg_variant_child.py,
the `pack` command), so a segfault is an exit status here, with the input it happened on.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from packer.core.index import REJECTS_NAME, open_dataset
from packer.imaging.jpeg_frame import native_refusal, read_frame
from tests.helpers import FORMATS, jpeg_bytes, pack_command, png_bytes, random_image
from tests.jpeg_variant_support import (
    CJPEG,
    CJPEG_VARIANTS,
    NO_CJPEG,
    damaged_variants,
    relabelled_variants,
    valid_variants,
)

NPY_SIZE = "12x16"
NATIVE_VARIANTS = ("baseline", "progressive", "restart", "restart_blocks", "grayscale",
                   "optimize", "sample_1x2", "quality_100")
EXPECTED_SOF = {"baseline": 0xC0, "progressive": 0xC2, "arithmetic": 0xC9,
                "progressive_arithmetic": 0xCA, "lossless_gray": 0xC3, "lossless_rgb": 0xC3,
                "extended12": 0xC1}


def pillow_pixels(data: bytes) -> np.ndarray | None:
    """Pillow's upright RGB decode of the whole image; None if Pillow cannot decode it."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray((ImageOps.exif_transpose(image) or image).convert("RGB"))
    except Exception:
        return None


def run(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def survived(done: subprocess.CompletedProcess[str]) -> str:
    """Why a child failed: its status and the last lines it wrote (the input it was at)."""
    return f"exit status {done.returncode}; last stderr: {done.stderr[-600:]!r}"


@pytest.fixture(scope="module")
def variants() -> dict[str, bytes]:
    valid = valid_variants()
    out = {**valid, **relabelled_variants(jpeg_bytes(random_image(40, 24, seed=5)),
                                          valid["lossless_gray"])}
    for name, data in valid.items():
        out.update(damaged_variants(name, data))
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, variants: dict[str, bytes]) -> Path:
    """ordinary/ (a JPEG with EXIF rotation among plain JPEGs and a PNG), valid/, damaged/."""
    root = tmp_path_factory.mktemp("jpeg_variants") / "src"
    for folder in ("ordinary", "valid", "damaged"):
        (root / folder).mkdir(parents=True)
    exif = Image.Exif()
    exif[0x0112] = 6
    (root / "ordinary" / "rotated.jpg").write_bytes(
        jpeg_bytes(random_image(30, 20, seed=1), exif=exif.tobytes()))
    (root / "ordinary" / "plain.jpg").write_bytes(jpeg_bytes(random_image(64, 48, seed=2)))
    (root / "ordinary" / "flat.png").write_bytes(png_bytes(random_image(20, 30, seed=3)))
    for name, data in variants.items():
        (root / ("damaged" if "-" in name else "valid") / f"{name}.jpg").write_bytes(data)
    return root


def expected(source: Path) -> dict[str, np.ndarray | None]:
    """key -> Pillow's pixels (None: Pillow cannot decode the file) of every input."""
    return {str(path.relative_to(source).with_suffix("")): pillow_pixels(path.read_bytes())
            for path in sorted(source.rglob("*.*"))}


@pytest.fixture(scope="module")
def packed(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The source converted to every format by the `pack` command, each in its own process."""
    out = tmp_path_factory.mktemp("jpeg_variants_out")
    for fmt in FORMATS:
        size = ("--size", NPY_SIZE) if fmt == "npy" else ()
        done = run(*pack_command(), "convert", source, out / fmt, "--to", fmt, *size)
        assert done.returncode == 0, f"pack convert --to {fmt}: {survived(done)}"
    return {fmt: out / fmt for fmt in FORMATS}


def test_cjpeg_writes_every_variant(variants: dict[str, bytes]) -> None:
    if CJPEG is None:
        pytest.skip(NO_CJPEG)
    assert set(CJPEG_VARIANTS) <= set(variants)
    for name, sof in EXPECTED_SOF.items():
        frame = read_frame(variants[name])
        assert frame is not None and frame.sof == sof, name
    assert pillow_pixels(variants["lossless_gray"]) is not None  # the case that crashed


def test_every_decode_entry_point_survives(source: Path) -> None:
    """Every native decode (forced, whatever fast_size says) and every Pillow one, on every
    variant; the fast path still takes every ordinary JPEG and nothing unusual."""
    done = run(sys.executable, "-m", "tests.jpeg_variant_child", "decoders", source)
    assert done.returncode == 0, survived(done)
    fast = json.loads(done.stdout)
    ordinary = ["plain.jpg"] + [f"{name}.jpg" for name in NATIVE_VARIANTS if CJPEG]
    assert all(fast[name] for name in ordinary), fast
    for name, took in fast.items():
        if took:
            assert native_refusal(next(source.rglob(name)).read_bytes()) is None, name
    assert not any(fast[f"{name}.jpg"] for name in ("lossless_gray", "lossless_rgb",
                                                     "extended12", "baseline-as_lossless"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_convert_packs_what_pillow_decodes(source: Path, packed: dict[str, Path],
                                           fmt: str) -> None:
    want = expected(source)
    _, table = open_dataset(packed[fmt])
    keys = set(table.keys())
    assert keys == {key for key, pixels in want.items() if pixels is not None}
    rejects = [json.loads(line)
               for line in (packed[fmt] / REJECTS_NAME).read_text().splitlines()]
    named = (Path(r["path"]).relative_to(source).with_suffix("").as_posix() for r in rejects)
    assert sorted(named) == sorted(
        key for key, pixels in want.items() if pixels is None)
    for reject in rejects:
        assert reject["reason"] and "\n" not in reject["reason"], reject
    assert {"valid/lossless_gray", "valid/lossless_rgb", "ordinary/rotated"} <= keys
    twelve = next(r["reason"] for r in rejects if r["path"].endswith("extended12.jpg"))
    assert "12-bit" in twelve, twelve


def test_resize_packs_what_pillow_decodes(source: Path, tmp_path: Path) -> None:
    """Re-encoding decodes through Pillow's DCT-scaled draft: lossless streams decode whole."""
    dst = tmp_path / "resized"
    done = run(*pack_command(), "convert", source, dst, "--to", "wds", "--resize", "10",
               "--encode", "png")
    assert done.returncode == 0, survived(done)
    assert set(open_dataset(dst)[1].keys()) == {
        key for key, pixels in expected(source).items() if pixels is not None}


@pytest.mark.parametrize("fmt", FORMATS)
def test_reports_survive(source: Path, packed: dict[str, Path], fmt: str) -> None:
    num_samples = open_dataset(packed[fmt])[0].num_samples
    verify = run(*pack_command(), "verify", packed[fmt], "--source", source)
    assert verify.returncode == 0, survived(verify)
    stats = run(*pack_command(), "stats", packed[fmt], "--json")
    assert stats.returncode == 0, survived(stats)
    assert sum(json.loads(stats.stdout)["classes"].values()) == num_samples
    near = run(*pack_command(), "dedup", packed[fmt], "--near")
    assert near.returncode == 0, survived(near)


def test_readers_read_back_pillow_pixels(source: Path, packed: dict[str, Path],
                                         tmp_path: Path) -> None:
    done = run(sys.executable, "-m", "tests.jpeg_variant_child", "readers", tmp_path,
               *packed.values(), timeout=300)
    assert done.returncode == 0, survived(done)
    report = json.loads(done.stdout)
    want = expected(source)
    num_samples = sum(pixels is not None for pixels in want.values())
    for fmt, counts in report.items():
        assert set(counts.values()) == {num_samples}, (fmt, counts)
        if fmt == "npy":
            continue
        listed = json.loads((tmp_path / f"{fmt}.json").read_text())
        with np.load(tmp_path / f"{fmt}.npz") as arrays:
            for n, key in enumerate(listed["keys"]):
                pixels = want[key]
                assert pixels is not None and np.array_equal(arrays[f"arr_{n}"], pixels), key


def test_check_none_keeps_undecodable_bytes_without_a_crash(source: Path,
                                                            tmp_path: Path) -> None:
    """With --check none every input is packed; readers then refuse the undecodable ones
    with a Python error and the reports with a one-line error, never a crash."""
    dst = tmp_path / "lmdb"
    done = run(*pack_command(), "convert", source, dst, "--to", "lmdb", "--check", "none")
    assert done.returncode == 0, survived(done)
    want = expected(source)
    assert open_dataset(dst)[0].num_samples == len(want)
    read = run(sys.executable, "-m", "tests.jpeg_variant_child", "readers", tmp_path, dst,
               timeout=300)
    assert read.returncode == 0, survived(read)
    listed = json.loads((tmp_path / "lmdb.json").read_text())
    assert sorted(listed["keys"]) == sorted(k for k, v in want.items() if v is not None)
    assert len(listed["failed"]) == sum(v is None for v in want.values())
    for command in (("stats", dst), ("dedup", dst, "--near"), ("verify", dst)):
        report = run(*pack_command(), *command)
        assert report.returncode in (0, 1), (command, survived(report))
        assert "Traceback" not in report.stderr, (command, report.stderr)
