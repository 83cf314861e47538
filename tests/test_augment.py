"""Train-time crops (issue 12): a pure function of the sample, torchvision's rule.

- the crop of a sample is a pure function of (seed, epoch, index);
- `params` draws what torchvision's get_params draws (KS statistic against the rule
  reimplemented here on torch's generator), flips at the asked rate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from readers import RandomResizedCrop

OUT = 16
SEED = 5
CROP = RandomResizedCrop(OUT)
DRAWS = 20_000
KS_LIMIT = 0.02  # two-sample KS critical value at alpha ~0.001 for 20,000 draws each


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
