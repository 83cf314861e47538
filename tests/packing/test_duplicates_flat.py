"""`pack dedup --near` on flat images (one colour, a smooth gradient): they are compared by
colour among themselves, so a red image never joins white ones, white ones of any size
join each other, and detailed near copies still group by their dHash."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image, ImageDraw

import packer
from packer.dataset.flat import MIN_DETAIL, colour_links
from packer.dataset.near import components, dhash, hashes_of, near_duplicates
from packer.testing import synthetic_image
from tests.helpers import run_pack

SCENES = 3
WHITE = {"flat/white_640", "flat/white_640_copy", "flat/white_300"}
RED = {"flat/red_2x1", "flat/red_400"}
ALONE = {"flat/black_300", "flat/ramp_blue", "flat/ramp_yellow"}  # no group: nothing alike
NUM_FLAT = len(WHITE | RED | ALONE)


def _scene(seed: int) -> Image.Image:
    """A detailed picture: a textured ground and a few shapes of random colours."""
    rng = np.random.default_rng(seed)
    image = synthetic_image(rng, 192, 144)
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = (int(v) for v in rng.integers(0, 150, size=2))
        size = int(rng.integers(15, 50))
        colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
        draw.ellipse((x, y, x + size, y + size * 0.7), fill=colour)
    return image


def _ramp(width: int, height: int, colour: tuple[int, int, int]) -> Image.Image:
    """A smooth gradient, darker to the right: a dHash of it is all zeros."""
    fade = np.linspace(1.0, 0.4, width)[None, :, None] * np.array(colour)[None, None, :]
    return Image.fromarray(np.repeat(fade, height, axis=0).astype(np.uint8), "RGB")


def _write_source(src: Path) -> None:
    flat, scenes = src / "flat", src / "scenes"
    flat.mkdir(parents=True)
    scenes.mkdir()
    Image.new("RGB", (2, 1), (255, 0, 0)).save(flat / "red_2x1.png")
    Image.new("RGB", (400, 200), (255, 0, 0)).save(flat / "red_400.jpg", quality=60)
    Image.new("RGB", (640, 480), "white").save(flat / "white_640.jpg", quality=90)
    shutil.copyfile(flat / "white_640.jpg", flat / "white_640_copy.jpg")  # exact copy
    Image.new("RGB", (300, 200), "white").save(flat / "white_300.png")
    Image.new("RGB", (300, 200), "black").save(flat / "black_300.png")
    _ramp(320, 200, (40, 90, 230)).save(flat / "ramp_blue.png")
    _ramp(320, 200, (230, 200, 40)).save(flat / "ramp_yellow.png")
    for k in range(SCENES):
        image = _scene(k)
        image.save(scenes / f"s{k}.jpg", quality=90)
        image.save(scenes / f"s{k}_q60.jpg", quality=60)  # re-encoded
        image.resize((image.width * 9 // 10, image.height * 9 // 10),
                     Image.Resampling.BILINEAR).save(scenes / f"s{k}_small.png")  # resized


@pytest.fixture(scope="module", params=["wds", "npy"])
def dataset(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flat")
    _write_source(root / "src")
    dst = root / f"data.{request.param}"
    packer.convert(root / "src", dst, request.param, run=packer.ConvertOptions(workers=0))
    return dst


def test_flat_images_group_by_colour_and_detailed_copies_by_hash(dataset: Path) -> None:
    report = near_duplicates(dataset, distance=4, workers=2)
    scenes = [{f"scenes/s{k}", f"scenes/s{k}_q60", f"scenes/s{k}_small"} for k in range(SCENES)]
    groups = {frozenset(group.keys): group.flat for group in report.groups}
    assert groups == {frozenset(WHITE): True, frozenset(RED): True,
                      **{frozenset(scene): False for scene in scenes}}
    assert report.num_flat == NUM_FLAT
    keys = {key for group in report.groups for key in group.keys}
    assert not keys & ALONE


def test_the_old_hash_alone_lumps_them_together(dataset: Path) -> None:
    """What the detail measure is for: every flat image hashes (nearly) alike."""
    rows = hashes_of(dataset, workers=1)
    flat = rows["detail_9x8"] < MIN_DETAIL
    assert flat.sum() == NUM_FLAT
    assert np.all(np.bitwise_count(rows["dhash_9x8"][flat]) <= 4)  # near zero: near each other
    assert np.all(rows["rgb_2x2"][~flat] == 0)  # a detailed sample's colour is not computed


def test_cli_reports_flat_samples_apart(dataset: Path) -> None:
    result = run_pack("dedup", dataset, "--near")
    assert result.exit_code == 0, result.output
    assert f"{NUM_FLAT} flat sample(s)" in result.output and "(flat: by colour)" in result.output
    facts = json.loads(run_pack("dedup", dataset, "--near", "--json").output)
    assert facts["num_flat"] == NUM_FLAT
    assert sorted(group.get("flat", False) for group in facts["groups"]) == \
        [False] * SCENES + [True, True]
    assert "num_flat" not in json.loads(run_pack("dedup", dataset, "--json").output)


def test_a_file_of_the_older_columns_is_computed_again(dataset: Path, tmp_path: Path) -> None:
    folder = tmp_path / dataset.name
    shutil.copytree(dataset, folder)
    rows = hashes_of(folder, workers=1)
    old = np.zeros(len(rows), [("digest", np.uint8, (16,)), ("dhash_9x8", "<u8")])
    old["digest"], old["dhash_9x8"] = rows["digest"], rows["dhash_9x8"]
    buffer = io.BytesIO()
    np.save(buffer, old)
    (folder / "near-hashes.npy").write_bytes(buffer.getvalue())
    assert np.array_equal(hashes_of(folder, workers=1), rows)
    assert np.load(folder / "near-hashes.npy").dtype == rows.dtype  # rewritten in full


def test_detail_counts_comparisons_decided_each_way() -> None:
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (64, 72), dtype=np.uint8))
    assert dhash(Image.new("L", (50, 40), 200)) == (0, 0)
    assert dhash(_ramp(90, 80, (200, 200, 200)).convert("L")) == (0, 0)
    assert dhash(noise)[1] >= MIN_DETAIL


@given(st.lists(st.lists(st.integers(0, 40), min_size=12, max_size=12), max_size=30),
       st.integers(0, 12))
def test_colour_links_join_what_brute_force_pairs_join(values: list[list[int]],
                                                       tolerance: int) -> None:
    thumbs = np.array(values, np.uint8).reshape(-1, 12)
    n = len(thumbs)
    want = np.array([(i, j) for i in range(n) for j in range(i + 1, n)
                     if np.abs(thumbs[i].astype(int) - thumbs[j]).max() <= tolerance],
                    np.int64).reshape(-1, 2)
    links = colour_links(thumbs, tolerance)
    assert np.all(links[:, 0] < links[:, 1])
    assert [g.tolist() for g in components(links, n)] == \
        [g.tolist() for g in components(want, n)]
