"""Benchmark photos from a clone: an ImageFolder of real-looking JPEGs, nothing downloaded.

    python -m devtools.bench.photos OUT --count 10000 [--classes 10] [--seed 0]

What a benchmark needs from its photos is what sets the decode and resize cost: the
pixel count, the JPEG quality and how much detail the entropy coder meets. So each
image is a crop of a procedurally generated scene with the statistics of natural
photographs: a power spectrum falling as 1/f^2 (the law natural images follow), colour
that varies more slowly than brightness, a sky-to-ground gradient, soft-edged objects
and sensor noise. Crops are ImageNet-like: 250-600 x 200-500 pixels cut from the scene
at one of three scales, JPEG quality 75-95, about 35 KB each. The same seed gives the
same bytes, so benchmark runs compare like with like. Needs numpy and Pillow only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFilter

SCENE_SIDE = 1024  # pixels of a generated scene before it is scaled
NUM_SCENES = 24
SCALES = (1.0, 0.7, 0.5)  # a scene is cut at these sizes, as photos are at several zooms
CROP_WIDTH, CROP_HEIGHT = (250, 600), (200, 500)
QUALITY = (75, 95)

Pixels = npt.NDArray[np.float64]


def pink_noise(rng: np.random.Generator, side: int, beta: float) -> Pixels:
    """A (side, side) field, mean 0 and std 1, whose amplitude spectrum falls as 1/f^beta."""
    fy = np.fft.fftfreq(side)[:, None]
    fx = np.fft.rfftfreq(side)[None, :]
    radius = np.hypot(fx, fy)
    radius[0, 0] = 1.0
    spectrum = radius ** -beta * np.exp(2j * np.pi * rng.random(radius.shape))
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(side, side))
    return np.asarray((field - field.mean()) / field.std())


def blobs(rng: np.random.Generator, side: int) -> Pixels:
    """Soft-edged objects: a few ellipses of random brightness, blurred, as a (side, side) map."""
    canvas = Image.new("L", (side, side), 128)
    draw = ImageDraw.Draw(canvas)
    for _ in range(int(rng.integers(4, 12))):
        x, y = rng.integers(0, side, size=2)
        rx, ry = rng.integers(side // 20, side // 4, size=2)
        draw.ellipse((x - rx, y - ry, x + rx, y + ry), fill=int(rng.integers(30, 226)))
    soft = canvas.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(1, 4))))
    return (np.asarray(soft, np.float64) - 128.0) / 64.0


def scene(rng: np.random.Generator, side: int = SCENE_SIDE) -> Image.Image:
    """One natural-looking RGB scene: brightness detail, slower colour, gradient, objects."""
    light = pink_noise(rng, side, float(rng.uniform(1.0, 1.4)))  # amplitude ~1/f: power ~1/f^2
    tint = [pink_noise(rng, side, 1.6) for _ in range(2)]  # colour varies more slowly
    base = rng.uniform(60, 190, size=3)
    sky = rng.uniform(-40, 40, size=3)  # top-to-bottom colour change
    rows = np.linspace(-1.0, 1.0, side)[:, None, None]
    pixels = (base + rows * sky
              + (light[..., None] * rng.uniform(12, 30))
              + (blobs(rng, side)[..., None] * rng.uniform(20, 50, size=3))
              + np.stack(tint, axis=-1) @ rng.uniform(-14, 14, size=(2, 3))
              + rng.normal(0, 1.0, size=(side, side, 3)))  # sensor noise
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")


def scaled_scenes(rng: np.random.Generator, count: int) -> list[Image.Image]:
    """`count` scenes, each at every scale of SCALES."""
    out = []
    for _ in range(count):
        image = scene(rng)
        out += [image.resize((round(image.width * s), round(image.height * s)),
                             Image.Resampling.LANCZOS) for s in SCALES]
    return out


def crop(rng: np.random.Generator, image: Image.Image) -> Image.Image:
    """An ImageNet-like crop: 250-600 x 200-500 pixels (at most the image) anywhere in it."""
    width = min(int(rng.integers(CROP_WIDTH[0], CROP_WIDTH[1] + 1)), image.width)
    height = min(int(rng.integers(CROP_HEIGHT[0], CROP_HEIGHT[1] + 1)), image.height)
    x = int(rng.integers(0, image.width - width + 1))
    y = int(rng.integers(0, image.height - height + 1))
    return image.crop((x, y, x + width, y + height))


def write_photos(out: Path, count: int, classes: int = 10, seed: int = 0) -> Path:
    """Write `count` JPEGs into `out/class_NNN/img_NNNNNNN.jpg`, round-robin over classes."""
    rng = np.random.default_rng(seed)
    sources = scaled_scenes(rng, min(NUM_SCENES, max(1, count)))
    for c in range(classes):
        (out / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        image = crop(rng, sources[int(rng.integers(len(sources)))])
        quality = int(rng.integers(QUALITY[0], QUALITY[1] + 1))
        image.save(out / f"class_{i % classes:03d}" / f"img_{i:07d}.jpg", quality=quality)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write (class sub-folders)")
    parser.add_argument("--count", type=int, default=10000, help="images (default 10000)")
    parser.add_argument("--classes", type=int, default=10, help="class folders (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="the same seed, the same bytes")
    args = parser.parse_args(argv)
    if args.count < 1 or args.classes < 1:
        parser.error("--count and --classes must be positive")
    write_photos(args.out, args.count, args.classes, args.seed)
    print(f"wrote {args.count} images in {args.classes} classes to {args.out}")


if __name__ == "__main__":
    main()
