"""Generate a small image folder for the demo and the tests (no committed binary data).

Images are smooth gradients with noise and shapes, so JPEG sizes and decode costs look
like photos rather than flat colours. Sizes vary, and a few PNGs are mixed in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def synthetic_image(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A textured RGB image of the given size."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, size=3)
    freq = rng.uniform(0.01, 0.06, size=3)
    channels = [127 + 100 * np.sin(freq[c] * x + phase[c]) * np.cos(freq[c] * y) for c in range(3)]
    pixels = np.stack(channels, axis=-1) + rng.normal(0, 12, size=(height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def make_sample_folder(out: str | Path, count: int = 200, classes: int = 4, seed: int = 0,
                       min_side: int = 96, max_side: int = 320) -> Path:
    """Write `count` images into `out/<class>/...`, a few PNG, the rest JPEG."""
    root = Path(out)
    rng = np.random.default_rng(seed)
    for i in range(count):
        folder = root / f"class_{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        width, height = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
        image = synthetic_image(rng, width, height)
        if i % 10 == 9:
            image.save(folder / f"img_{i:06d}.png")
        else:
            image.save(folder / f"img_{i:06d}.jpg", quality=int(rng.integers(75, 95)))
    return root
