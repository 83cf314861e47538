"""Issue 12's quality bound on the DCT-scaled fast paths: `size=` and both crops.

Against a Lanczos resize of the full decode's same box, ours must stay within 1.25x
Pillow bilinear's mean distance and 1.25x its worst + 1 level. Generated images large
enough that every DCT scale (1/2, 1/4, 1/8) is taken; devtools/bench/quality.py checks the
same bound on photographs at 64-224. Scaling right down to the target fails this test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import readers.decoding.decode
from devtools.bench.quality import WAYS, jpeg_samples, score
from readers.decoding.decode import dct_factor
from tests.helpers import jpeg_bytes, random_image

SIDES = [(300, 420), (520, 380), (700, 900), (1100, 640), (450, 450), (860, 1300)]
SIZES = (40, 64)


@pytest.fixture(scope="module")
def samples() -> list[bytes]:
    return [jpeg_bytes(random_image(w, h, seed), quality=85)
            for seed, (h, w) in enumerate(SIDES)]


def test_every_dct_scale_is_exercised() -> None:
    factors = {dct_factor(side, (size, size)) for side in SIDES for size in SIZES}
    assert factors == {2, 4, 8}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("way", WAYS)
def test_within_the_bound_of_pillow_bilinear(samples: list[bytes], way: str,
                                             size: int) -> None:
    scores = score(samples, way, size)
    assert scores.passes, scores.row()


def test_the_bound_catches_scaling_down_to_the_target(samples: list[bytes],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: the DCT scale right down to the output breaks it."""
    monkeypatch.setattr(readers.decoding.decode, "OVERSAMPLE", 1)
    assert not score(samples, "center", SIZES[0]).passes


def test_the_bound_catches_stretching_the_rounded_up_edge(
        samples: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: resizing libjpeg's rounded-up pixels as if whole breaks it."""
    monkeypatch.setattr(readers.decoding.decode, "_resize_whole",
                        lambda hwc, extent, size: readers.decoding.decode.resize_hwc(hwc, size))
    assert not score(samples, "size", SIZES[0]).passes


def test_photo_folders_give_only_their_jpegs(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.jpg").write_bytes(jpeg_bytes(random_image(20, 20, i)))
    random_image(20, 20).save(folder / "x.png")
    got = jpeg_samples(tmp_path, 2)
    assert len(got) == 2 and all(data[:2] == b"\xff\xd8" for data in got)
