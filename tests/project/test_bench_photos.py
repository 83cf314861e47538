"""devtools.bench.photos: the benchmark photos a clone generates for itself."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image

from devtools.bench.photos import CROP_HEIGHT, CROP_WIDTH, main, write_photos


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.jpg"))}


def test_photos_are_imagenet_like_jpegs_in_class_folders(tmp_path: Path) -> None:
    out = write_photos(tmp_path / "photos", count=6, classes=2, seed=3)
    files = sorted(out.rglob("*.jpg"))
    assert [p.parent.name for p in files] == ["class_000"] * 3 + ["class_001"] * 3
    for path in files:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            assert CROP_WIDTH[0] <= image.width <= CROP_WIDTH[1]
            assert CROP_HEIGHT[0] <= image.height <= CROP_HEIGHT[1]
            assert len(image.convert("L").getcolors(256) or ()) > 64  # detail, not a flat fill


def test_the_same_seed_gives_the_same_bytes(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    main([str(tmp_path / "a"), "--count", "3", "--classes", "1", "--seed", "5"])
    main([str(tmp_path / "b"), "--count", "3", "--classes", "1", "--seed", "5"])
    write_photos(tmp_path / "c", count=3, classes=1, seed=6)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")
    assert digests(tmp_path / "a") != digests(tmp_path / "c")
    assert capsys.readouterr().out.startswith("wrote 3 images in 1 classes to ")
