"""`pack stats` / packer.stats: mean/std against numpy over the decoded pixels, exact counts."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import packer
from packer.core.index import open_dataset
from packer.dataset import stats_pass
from packer.dataset.splits import key_hashes, load_subset, split
from packer.dataset.stats import PIXEL_SAMPLE_SEED
from readers import PackedDataset
from tests.helpers import pack_every_format, pack_with_fields, run_pack


@pytest.fixture(scope="module")
def every_format(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("stats"), count=30, npy_size=(20, 24),
                             min_side=24, max_side=70)


def decoded(folder: Path) -> list[np.ndarray]:
    """Every sample's pixels as the readers decode them, (H, W, 3) uint8."""
    dataset = PackedDataset(folder, decode="rgb8")
    return [dataset[i][0].permute(1, 2, 0).numpy() for i in range(len(dataset))]


def test_mean_std_match_numpy_over_decoded_pixels(every_format: dict[str, Path],
                                                  fmt: str) -> None:
    images = decoded(every_format[fmt])
    pixels = np.concatenate([image.reshape(-1, 3) for image in images]).astype(np.float64) / 255
    facts = packer.stats(every_format[fmt], workers=2)
    np.testing.assert_allclose(facts.mean, pixels.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(facts.std, pixels.std(axis=0), rtol=0, atol=1e-12)
    assert facts.num_pixels == len(pixels)
    widths = [image.shape[1] for image in images]
    heights = [image.shape[0] for image in images]
    assert (facts.width.min, facts.width.max) == (min(widths), max(widths))
    assert (facts.height.min, facts.height.max) == (min(heights), max(heights))
    assert sum(facts.width.counts) == sum(facts.aspect.counts) == len(images)
    assert facts.aspect.mean == pytest.approx(np.mean(np.array(widths) / np.array(heights)))


def test_counts_and_bytes_are_exact(every_format: dict[str, Path], fmt: str) -> None:
    folder = every_format[fmt]
    dataset = PackedDataset(folder, decode="raw")
    labels = [dataset[i][1] for i in range(len(dataset))]
    sizes = np.array([len(dataset[i][0]) for i in range(len(dataset))])
    facts = packer.stats(folder, workers=1)
    counts = Counter(labels)
    assert facts.classes == {name: counts[c] for c, name in enumerate(dataset.class_names)}
    assert facts.imbalance == max(counts.values()) / min(counts.values())
    assert facts.bytes_mean == pytest.approx(sizes.mean())
    assert facts.bytes_p50 == np.percentile(sizes, 50)
    assert facts.bytes_p95 == np.percentile(sizes, 95)


def test_the_number_of_threads_changes_nothing(every_format: dict[str, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_pass, "CHUNK", 4)  # many chunks, finished in any order
    one, four = (dataclasses.replace(packer.stats(every_format["wds"], workers=w), seconds=0)
                 for w in (1, 4))
    assert one == four


def test_field_value_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, expected = pack_with_fields(tmp_path, "lmdb")
    facts = packer.stats(folder)
    captions = Counter(row["caption"] for row in expected.values() if row["caption"] is not None)
    assert facts.field_values["caption"] == dict(captions.most_common())
    assert facts.field_values["count"] == {str(row["count"]): 1 for row in expected.values()}
    assert "score" not in facts.field_values  # floats are not categorical
    monkeypatch.setattr(stats_pass, "MAX_DISTINCT", 4)
    facts = packer.stats(folder)
    assert facts.not_categorical == ("caption", "count") and not facts.field_values


def test_cli_json_and_text(every_format: dict[str, Path]) -> None:
    result = run_pack("stats", every_format["hdf5"], "--json", "--workers", "2")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts["pixels"] == "stored" and len(facts["mean"]) == 3
    assert sum(facts["classes"].values()) == facts["num_samples"] == 30
    text = run_pack("stats", every_format["hdf5"])
    assert text.exit_code == 0, text.output
    assert "mean (stored pixels, 0-1): " in text.output and "classes (imbalance" in text.output


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="the plot extra (matplotlib) is not installed")
def test_cli_plot_writes_a_png(every_format: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "stats.png"
    result = run_pack("stats", every_format["npy"], "--plot", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_names_a_folder_that_is_no_dataset(tmp_path: Path) -> None:
    result = run_pack("stats", tmp_path)
    assert result.exit_code != 0
    assert "index.json" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("fmt", ["wds", "hdf5"])
def test_pixel_samples_decode_the_keys_of_smallest_hash(every_format: dict[str, Path],
                                                        fmt: str) -> None:
    folder = every_format[fmt]
    _, table = open_dataset(folder)
    chosen = np.argsort(key_hashes(table, PIXEL_SAMPLE_SEED), kind="stable")[:7].tolist()
    images = decoded(folder)
    pixels = np.concatenate([images[i].reshape(-1, 3) for i in chosen]).astype(np.float64)
    some = packer.stats(folder, workers=2, max_pixel_samples=7)
    every = packer.stats(folder, workers=2)
    np.testing.assert_allclose(some.std, (pixels / 255).std(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(some.mean, (pixels / 255).mean(axis=0), rtol=0, atol=1e-12)
    assert some.num_pixel_samples == 7 and every.num_pixel_samples == 30
    # sizes from the headers of the samples not decoded: the same as decoded
    assert (some.width, some.height, some.aspect) == (every.width, every.height, every.aspect)
    assert some.classes == every.classes and some.bytes_p95 == every.bytes_p95
    result = run_pack("stats", folder, "--pixel-samples", "7")
    assert result.exit_code == 0 and "(over 7 samples)" in result.output


def test_the_pixel_sample_is_not_the_val_split(every_format: dict[str, Path],
                                               tmp_path: Path) -> None:
    """`pack split`'s default seed puts the smallest key hashes in val: the pixel sample
    hashes the keys with its own seed, so mean and std are not val's alone."""
    folder = tmp_path / "d.wds"
    shutil.copytree(every_format["wds"], folder)
    split(folder, 0.25)
    index, table = open_dataset(folder)
    val = set(load_subset(folder, index, "val").tolist())
    hashes = key_hashes(table, PIXEL_SAMPLE_SEED)  # what the stats use (the test above)
    chosen = set(np.argsort(hashes, kind="stable")[: len(val)].tolist())
    assert len(chosen) == len(val) and chosen != val and chosen - val
