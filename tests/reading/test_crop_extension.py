"""Which cropped decode runs (packer.imaging.crop_extension): the compiled extension only
when its self-test passes, crops off an iMCU-row boundary exact at every DCT scale, the
environment's off switch crossing into spawned workers, and PACKER_REQUIRE_EXTENSION."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from packer.imaging import crop_extension, jpeg
from packer.imaging.crop_extension import (
    CropExtension,
    ExtensionMissingError,
    full_decode_only,
    self_test,
)
from tests.helpers import jpeg_bytes, random_image, run_pack

cropjpeg = pytest.importorskip("packer.imaging._cropjpeg",
                               reason="the optional extension is not built here")
HEIGHT, WIDTH = 397, 301  # no side a multiple of an iMCU


@pytest.mark.parametrize("subsampling", ["4:2:0", "4:2:2", "4:4:4"])
@pytest.mark.parametrize("denom", [1, 2, 4, 8])
def test_crops_off_an_imcu_row_boundary_equal_the_full_decode(subsampling: str,
                                                              denom: int) -> None:
    """Tops at every row of the first two iMCU rows and some further down, boxes taller
    than one read of rows: the cut of the full decode, exactly."""
    data = jpeg_bytes(random_image(WIDTH, HEIGHT, seed=5), quality=88, subsampling=subsampling)
    full = jpeg.decode_scaled(data, (HEIGHT, WIDTH), denom)
    assert full is not None
    height, width = full.shape[:2]
    tops = sorted({*range(min(33, height - 1)), height // 2 + 3, height - 2})
    for top in tops:
        rows = min(height - top, 37)
        got = np.frombuffer(cropjpeg.decode_crop(data, top, 3, rows, width - 5, denom),
                            np.uint8).reshape(rows, width - 5, 3)
        assert np.array_equal(got, full[top:top + rows, 3:width - 2]), (top, denom)


def test_the_extension_passes_its_self_test_here() -> None:
    assert self_test(cropjpeg.decode_crop) is None
    assert crop_extension.status().startswith("compiled cropped decode (libjpeg-turbo ")


def shifted(data: bytes | bytearray | memoryview, top: int, left: int, height: int,
            width: int, denom: int) -> bytearray:
    """A decode with the old bug's symptom: the row before the box returned as its first."""
    return cropjpeg.decode_crop(data, top - 1, left, height, width, denom)  # type: ignore[no-any-return]


def test_a_decoder_that_returns_stale_rows_fails_the_self_test(
        monkeypatch: pytest.MonkeyPatch) -> None:
    failure = self_test(shifted)
    assert failure is not None and "differs from the full decode" in failure
    fake = type(sys)("fake_cropjpeg")
    fake.decode_crop = shifted  # type: ignore[attr-defined]
    fake.libjpeg_turbo_version = 2001005  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "packer.imaging._cropjpeg", fake)
    crop_extension._load.cache_clear()
    try:
        loaded = crop_extension._load()
        assert loaded.decode is None
        assert loaded.status.startswith("full decode cut to the box: the extension "
                                        "(libjpeg-turbo 2.1.5) failed its self-test")
    finally:
        crop_extension._load.cache_clear()


def test_the_environment_turns_it_off_and_full_decode_only_restores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACKER_CROP_DECODE", raising=False)
    assert crop_extension.extension().decode is not None
    with full_decode_only():
        off = crop_extension.extension()
        assert off.decode is None and "PACKER_CROP_DECODE=full" in off.status
    assert crop_extension.extension().decode is not None
    monkeypatch.setenv("PACKER_CROP_DECODE", "full")
    with full_decode_only():
        pass
    assert crop_extension.extension().decode is None  # what was there before is back


def test_the_off_switch_reaches_a_spawned_process() -> None:
    with full_decode_only():
        done = subprocess.run([sys.executable, "-c", "from packer.imaging import "
                               "crop_extension as c; print(c.status())"],
                              capture_output=True, text=True, check=True)
    assert "PACKER_CROP_DECODE=full" in done.stdout


def test_require_extension_fails_only_when_it_cannot_be_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACKER_REQUIRE_EXTENSION", "1")
    crop_extension.require_extension()  # built and tested here: no error
    monkeypatch.setattr(crop_extension, "_load",
                        lambda: CropExtension(None, "full decode cut to the box: not built"))
    with pytest.raises(ExtensionMissingError, match="PACKER_REQUIRE_EXTENSION=1 but full "
                                                    "decode cut to the box: not built"):
        crop_extension.require_extension()
    monkeypatch.delenv("PACKER_REQUIRE_EXTENSION")
    crop_extension.require_extension()


def test_pack_info_env_names_the_decode_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PACKER_CROP_DECODE", raising=False)
    shown = run_pack("info", "--env")
    assert shown.exit_code == 0, shown.output
    assert "cropped JPEG decode: compiled cropped decode (libjpeg-turbo " in shown.output
    assert "torch: " in shown.output and "packer-readers: " in shown.output
    monkeypatch.setenv("PACKER_CROP_DECODE", "full")
    facts = json.loads(run_pack("info", "--env", "--json").output)
    assert facts["cropped JPEG decode"].startswith("full decode cut to the box: "
                                                   "PACKER_CROP_DECODE=full")


@pytest.mark.parametrize(("args", "words"), [((), "missing DST"),
                                             (("somewhere", "--env"), "not both")])
def test_pack_info_wants_a_dataset_or_env(args: tuple[str, ...], words: str) -> None:
    shown = run_pack("info", *args)
    assert shown.exit_code == 2 and words in shown.output
