"""Train-time crops fused into decode (issue 12): reproducible, faithful, torchvision's rule.

- the crop of a sample is a pure function of (seed, epoch, index): bit-identical batches
  for any num_workers, fork or spawn, map-style or iterable, and after a resume;
- each output is the full decode cropped to `params`' box and resized, within a bound
  (the DCT-scaled fast path included), flipped exactly when `params` says;
- `params` draws what torchvision's get_params draws (KS statistic against the rule
  reimplemented here on torch's generator), flips at the asked rate;
- CenterCrop is Pillow's resize-shorter-side-then-center-crop within a bound.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader

from readers import (
    CenterCrop,
    ChunkSampler,
    PackedDataset,
    PackedIterableDataset,
    RandomResizedCrop,
    collate,
    loop_state,
)
from readers.decoding.decode import dct_factor
from readers.options import PartitionOptions
from tests.helpers import pack_every_format

NUM = 24
OUT = 16
SEED = 5
CROP = RandomResizedCrop(OUT)
LOADERS = [(0, None), (1, "fork"), (2, "fork"), (2, "spawn")]
DRAWS = 20_000
KS_LIMIT = 0.02  # two-sample KS critical value at alpha ~0.001 for 20,000 draws each


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("augment"), NUM, (40, 40), 48, 200)


def full_images(path: Path) -> list[np.ndarray]:
    """Every sample decoded in full (HWC), as the reference crops start from."""
    return [np.asarray(image.permute(1, 2, 0)) for image, _ in PackedDataset(path)]


def reference(hwc: np.ndarray, augment: Any, epoch: int, index: int) -> torch.Tensor:
    """Full decode, crop params' box, torch antialiased bilinear resize, flip (Pillow's
    bilinear resize for a box whose edges fall between pixels)."""
    box = augment.params(SEED, epoch, index, hwc.shape[:2])
    if not all(float(v).is_integer() for v in box[:4]):
        return pillow_reference(hwc, augment, epoch, index, Image.Resampling.BILINEAR)
    top, left, height, width = (int(v) for v in box[:4])
    crop = torch.from_numpy(hwc[top:top + height, left:left + width])
    chw = crop.permute(2, 0, 1).unsqueeze(0).float()
    out = F.interpolate(chw, size=augment.output_size, mode="bilinear", antialias=True,
                        align_corners=False)[0].round().clamp(0, 255).to(torch.uint8)
    return out.flip(-1) if box.flipped else out


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().mean())


def by_key(batches: Any) -> dict[str, torch.Tensor]:
    return {key: image for images, _, keys in batches for image, key in zip(images, keys,
                                                                            strict=True)}


def loader(data: Any, workers: int, context: str | None, **kwargs: Any) -> DataLoader[Any]:
    extra: dict[str, Any] = {"multiprocessing_context": context} if workers else {}
    return DataLoader(data, batch_size=4, num_workers=workers, collate_fn=collate,
                      **extra, **kwargs)


# --- params: pure, in range, torchvision's distribution ------------------------------


def test_params_are_a_pure_function_of_seed_epoch_and_index() -> None:
    boxes = [CROP.params(SEED, 3, i, (375, 500)) for i in range(50)]
    assert boxes == [CROP.params(SEED, 3, i, (375, 500)) for i in range(50)]
    assert boxes != [CROP.params(SEED, 4, i, (375, 500)) for i in range(50)]
    assert boxes != [CROP.params(SEED + 1, 3, i, (375, 500)) for i in range(50)]
    for top, left, height, width, _ in boxes:
        assert top >= 0 and top + height <= 375 and left >= 0 and left + width <= 500


def torchvision_get_params(generator: torch.Generator, height: int, width: int,
                           scale: tuple[float, float],
                           ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """torchvision.transforms.RandomResizedCrop.get_params, as torchvision writes it."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1],
                                                     generator=generator).item()
        aspect_ratio = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1],
                                                        generator=generator).item())
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            j = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two CDFs."""
    points = np.union1d(a, b)
    cdf_a = np.searchsorted(np.sort(a), points, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), points, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def features(boxes: np.ndarray, image_size: tuple[int, int]) -> dict[str, np.ndarray]:
    """Area fraction, aspect ratio and relative centre of (top, left, height, width) rows."""
    height, width = image_size
    top, left, h, w = boxes.T.astype(np.float64)
    return {"area": h * w / (height * width), "ratio": w / h,
            "center_y": (top + h / 2) / height, "center_x": (left + w / 2) / width}


# a photo-like size, a small one (rounding matters) and a panorama (the fallback fires)
@pytest.mark.parametrize("image_size", [(375, 500), (40, 56), (60, 600)])
def test_params_match_torchvisions_rule(image_size: tuple[int, int]) -> None:
    ours = np.array([CROP.params(SEED, 0, i, image_size)[:4] for i in range(DRAWS)])
    generator = torch.Generator().manual_seed(SEED)
    theirs = np.array([torchvision_get_params(generator, *image_size, CROP.scale, CROP.ratio)
                       for _ in range(DRAWS)])
    mine, ref = features(ours, image_size), features(theirs, image_size)
    for name in mine:
        assert ks_statistic(mine[name], ref[name]) < KS_LIMIT, name
    assert (mine["area"] <= CROP.scale[1]).all() and (ours[:, 2:] >= 1).all()
    if image_size == (375, 500):  # large enough that rounding moves little
        assert (mine["area"] >= CROP.scale[0] - 0.005).all()
        assert ((mine["ratio"] >= 0.74) & (mine["ratio"] <= 1.345)).all()


def test_flip_rate_is_within_one_percent() -> None:
    for rate in (0.5, 0.2):
        crop = RandomResizedCrop(OUT, flip=rate)
        flips = np.mean([crop.params(SEED, 1, i, (100, 100)).flipped for i in range(DRAWS)])
        assert abs(flips - rate) < 0.01
    assert not any(RandomResizedCrop(OUT, flip=0).params(0, 0, i, (9, 9)).flipped
                   for i in range(200))


@pytest.mark.parametrize("bad", [{"size": 0}, {"scale": (0.5, 0.1)}, {"scale": (0.0, 1.0)},
                                 {"ratio": (2.0, 1.0)}, {"flip": 1.5}])
def test_bad_arguments_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        RandomResizedCrop(**{"size": OUT, **bad})


def test_dct_scale_keeps_the_box_at_least_twice_the_output() -> None:
    assert dct_factor((257, 700), (64, 64)) == 2  # 257 / 4 < 2 * 64
    assert dct_factor((1024, 1024), (64, 64)) == 8
    assert dct_factor((257, 700), (200, 200)) == 1
    assert dct_factor((438, 378), (64, 64)) == 2  # never 3/8, as min_height alone picks


# --- decode: faithful to the box, every format --------------------------------------


def pillow_reference(hwc: np.ndarray, augment: Any, epoch: int, index: int,
                     resample: Image.Resampling) -> torch.Tensor:
    """Full decode, Pillow resize of params' box with `resample`, flip."""
    top, left, height, width, flipped = augment.params(SEED, epoch, index, hwc.shape[:2])
    size = augment.output_size
    resized = Image.fromarray(hwc).resize((size[1], size[0]), resample,
                                          box=(left, top, left + width, top + height))
    out = torch.from_numpy(np.array(resized)).permute(2, 0, 1)
    return out.flip(-1) if flipped else out


@pytest.mark.parametrize("augment", [CROP, RandomResizedCrop((12, 20), scale=(0.5, 1.0)),
                                     CenterCrop(OUT, resize=20), CenterCrop(24)])
def test_each_output_is_the_full_decode_cropped_and_resized(paths: dict[str, Path], fmt: str,
                                                            augment: Any) -> None:
    """Within issue 12's quality bound: distance to a Lanczos resize of the full decode's
    box at most 1.25x Pillow bilinear's on average, worst at most 1.25x its worst + 1."""
    ds = PackedDataset(paths[fmt], seed=SEED, augment=augment)
    ds.set_epoch(2)
    ours, pillows = [], []
    for i, hwc in enumerate(full_images(paths[fmt])):
        image, _ = ds[i]
        assert image.dtype == torch.uint8 and image.shape == (3, *augment.output_size)
        want = reference(hwc, augment, 2, i)
        assert distance(image, want) < 1.5, i
        if augment.params(SEED, 2, i, hwc.shape[:2]).flipped:
            assert distance(image, want) < distance(image, want.flip(-1)), i
        lanczos = pillow_reference(hwc, augment, 2, i, Image.Resampling.LANCZOS)
        ours.append(distance(image, lanczos))
        pillows.append(distance(pillow_reference(hwc, augment, 2, i,
                                                 Image.Resampling.BILINEAR), lanczos))
    assert np.mean(ours) <= 1.25 * np.mean(pillows) + 0.01
    assert max(ours) <= 1.25 * max(pillows) + 1


def test_center_crop_is_pillows_resize_shorter_side_then_center_crop(
        paths: dict[str, Path]) -> None:
    ds = PackedDataset(paths["lmdb"], augment=CenterCrop(24, resize=32))
    for i, hwc in enumerate(full_images(paths["lmdb"])):
        height, width = hwc.shape[:2]
        scale = 32 / min(height, width)
        new_w, new_h = (32, int(32 * height / width)) if width <= height \
            else (int(32 * width / height), 32)
        assert abs(new_h - height * scale) < 1 and abs(new_w - width * scale) < 1
        resized = Image.fromarray(hwc).resize((new_w, new_h), Image.Resampling.BILINEAR)
        top, left = round((new_h - 24) / 2), round((new_w - 24) / 2)
        want = np.asarray(resized)[top:top + 24, left:left + 24]
        got = ds[i][0].permute(1, 2, 0).numpy()
        assert np.abs(got.astype(float) - want).mean() < 0.5, i


def test_transform_runs_after_the_crop_and_pil_mode_gives_images(
        paths: dict[str, Path]) -> None:
    ds = PackedDataset(paths["hdf5"], augment=CROP, transform=lambda x: x.float() / 255)
    image, _ = ds[0]
    assert image.dtype == torch.float32 and image.shape == (3, OUT, OUT)
    pil = PackedDataset(paths["hdf5"], decode="pil", augment=CROP)[0][0]
    assert isinstance(pil, Image.Image) and pil.size == (OUT, OUT)
    assert np.array_equal(np.asarray(pil), PackedDataset(
        paths["hdf5"], augment=CROP)[0][0].permute(1, 2, 0).numpy())


def test_pillow_codecs_and_rotated_jpegs_take_the_box_of_the_upright_image(
        tmp_path: Path) -> None:
    from packer import convert

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    pixels = np.random.default_rng(0).integers(0, 255, (30, 50, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(src / "png.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: the upright image is 50 x 30
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", exif=exif.tobytes())
    (src / "rot.jpg").write_bytes(out.getvalue())
    convert(tmp_path / "src", tmp_path / "lmdb", "lmdb")
    crop = CenterCrop(10, resize=10)
    full = full_images(tmp_path / "lmdb")
    assert [hwc.shape[:2] for hwc in full] == [(30, 50), (50, 30)]
    ds = PackedDataset(tmp_path / "lmdb", augment=crop)
    for i, hwc in enumerate(full):
        assert distance(ds[i][0], reference(hwc, crop, 0, i)) < 1.0


def test_augment_with_raw_or_a_size_is_refused(paths: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="decode='raw'"):
        PackedDataset(paths["wds"], decode="raw", augment=CROP)
    with pytest.raises(ValueError, match="size=None"):
        PackedIterableDataset(paths["wds"], size=(8, 8), augment=CROP)


# --- reproducible: any workers, fork or spawn, both datasets, resume ------------------


def map_epoch(path: Path, workers: int, context: str | None, epoch: int,
              seed: int = SEED) -> dict[str, torch.Tensor]:
    ds = PackedDataset(path, seed=seed, augment=CROP, with_keys=True)
    ds.set_epoch(epoch)
    return by_key(loader(ds, workers, context))


@pytest.mark.parametrize(("workers", "context"), LOADERS)
@pytest.mark.parametrize("fmt", ["wds", "npy"])
def test_map_style_batches_are_bit_identical_for_any_workers(paths: dict[str, Path],
                                                             fmt: str, workers: int,
                                                             context: str | None) -> None:
    want = map_epoch(paths[fmt], 0, None, 1)
    got = map_epoch(paths[fmt], workers, context, 1)
    assert got.keys() == want.keys()
    assert all(torch.equal(got[key], want[key]) for key in want)


def test_another_epoch_or_seed_gives_other_crops(paths: dict[str, Path]) -> None:
    base = map_epoch(paths["wds"], 0, None, 1)
    for other in (map_epoch(paths["wds"], 0, None, 2), map_epoch(paths["wds"], 0, None, 1, 6)):
        assert sum(not torch.equal(base[k], other[k]) for k in base) > NUM // 2


def iterable_epoch(path: Path, workers: int, context: str | None, epoch: int,
                   state: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
    ds = PackedIterableDataset(path, seed=SEED, augment=CROP, with_keys=True,
                               partition=PartitionOptions(chunk_size=4))
    ds.set_epoch(epoch)
    if state is not None:
        ds.load_state_dict(state)
    return by_key(loader(ds, workers, context))


@pytest.mark.parametrize(("workers", "context"), LOADERS)
def test_iterable_samples_are_bit_identical_for_any_workers_and_match_map_style(
        paths: dict[str, Path], workers: int, context: str | None) -> None:
    got = iterable_epoch(paths["lmdb"], workers, context, 3)
    want = map_epoch(paths["lmdb"], 0, None, 3)
    assert got.keys() <= want.keys() and len(got) == NUM
    assert all(torch.equal(got[key], want[key]) for key in got)


def test_iterable_resume_mid_epoch_gives_the_same_crops(paths: dict[str, Path]) -> None:
    full = iterable_epoch(paths["hdf5"], 2, "fork", 4)
    resumed = iterable_epoch(paths["hdf5"], 2, "fork", 4, loop_state(4, 2, 4, num_workers=2))
    assert len(resumed) == NUM - 2 * 4
    assert all(torch.equal(resumed[key], full[key]) for key in resumed)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_sampler_epochs_reach_persistent_workers(paths: dict[str, Path], context: str) -> None:
    """Lightning calls set_epoch on the sampler only: each pass's crops follow it."""
    ds = PackedDataset(paths["wds"], seed=SEED, augment=CROP, with_keys=True)
    sampler = ChunkSampler(ds, seed=1)
    data = loader(ds, 2, context, sampler=sampler, persistent_workers=True)
    for epoch in (0, 1, 3):
        sampler.set_epoch(epoch)
        got = by_key(data)
        assert ds.epoch == epoch
        want = map_epoch(paths["wds"], 0, None, epoch)
        assert all(torch.equal(got[key], want[key]) for key in got), epoch
