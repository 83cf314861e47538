"""Train-time crops and flips, chosen per sample before decode, which then decodes the crop.

    RandomResizedCrop(224)            training: torchvision's area/ratio rule, plus a flip
    CenterCrop(224, resize=256)       evaluation: resize the shorter side, center crop

Why not torchvision transforms after decode: the box must be known before decoding so a
JPEG is decoded only at the resolution the box needs (libjpeg-turbo's DCT scaling), and
the randomness must not depend on which worker, rank or process draws the sample. So
`params(seed, epoch, index, image_size)` is a pure function: its draws come from a
counter-based generator keyed by (seed, epoch, index, a stream constant), never from a
global or per-worker generator. (splitmix64 in plain Python, CropDraws: cheaper than
seeding a numpy Generator per sample and drawing scalars from it.)
The same seed gives bit-identical crops for any num_workers and after a resume, and a
user (or a test) can reproduce any sample's crop.

The sampling rule is torchvision's `RandomResizedCrop.get_params` (10 tries with a
uniform area fraction and a log-uniform aspect ratio, then the central-crop fallback),
reimplemented because torchvision is not a dependency; switching from torchvision keeps
the distribution, not the exact draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from readers.plan.chunks import check_epoch

# Stream constant of the crop generators: keeps them apart from the order's (1, 2).
CROP_STREAM = 0xC809
MAX_TRIES = 10  # torchvision's get_params


class Box(NamedTuple):
    """A crop in the pixels of the full, upright image, and whether to flip it.

    RandomResizedCrop's edges are whole pixels, as torchvision's; CenterCrop's may fall
    between pixels, where torchvision's resize-then-crop puts them (then exact).
    """

    top: float
    left: float
    height: float
    width: float
    flipped: bool


def _size_pair(size: int | tuple[int, int], name: str) -> tuple[int, int]:
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v >= 1 for v in pair):
        raise ValueError(f"{name} must be a positive int or (height, width), not {size!r}")
    return int(pair[0]), int(pair[1])


def _check_image_size(image_size: tuple[int, int]) -> tuple[int, int]:
    height, width = image_size
    if height < 1 or width < 1:
        raise ValueError(f"image_size must be a positive (height, width), not {image_size!r}")
    return int(height), int(width)


@dataclass(frozen=True)
class RandomResizedCrop:
    """A random area fraction in `scale` and aspect ratio (w/h) in `ratio`, resized to
    `size`, flipped horizontally with probability `flip`."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: float = 0.5

    def __post_init__(self) -> None:
        _size_pair(self.size, "size")
        low, high = self.scale
        if not 0 < low <= high <= 1:
            raise ValueError(f"scale must satisfy 0 < low <= high <= 1, not {self.scale!r}")
        low, high = self.ratio
        if not 0 < low <= high:
            raise ValueError(f"ratio must satisfy 0 < low <= high, not {self.ratio!r}")
        if not 0 <= self.flip <= 1:
            raise ValueError(f"flip is a probability in [0, 1], not {self.flip!r}")

    @property
    def output_size(self) -> tuple[int, int]:
        """(H, W) of every output image."""
        return _size_pair(self.size, "size")

    def params(self, seed: int, epoch: int, index: int, image_size: tuple[int, int]) -> Box:
        """The box and flip that sample `index` gets in `epoch`; image_size is (H, W)."""
        draws = CropDraws(seed, epoch, index)
        flipped = draws.uniform(0.0, 1.0) < self.flip
        top, left, height, width = sample_box(draws, _check_image_size(image_size),
                                              self.scale, self.ratio)
        return Box(top, left, height, width, flipped)


@dataclass(frozen=True)
class CenterCrop:
    """Resize the shorter side to `resize` (None: no resize), then crop the central `size`.

    Like torchvision's Resize(resize) + CenterCrop(size), but as one box in the stored
    pixels, so the decode does one resize. A box larger than the image is clamped to it
    (and stretched to `size`) where torchvision would pad with black.
    """

    size: int | tuple[int, int]
    resize: int | None = None

    def __post_init__(self) -> None:
        _size_pair(self.size, "size")
        if self.resize is not None and (not isinstance(self.resize, int) or self.resize < 1):
            raise ValueError(f"resize must be a positive int (the shorter side) or None, "
                             f"not {self.resize!r}")

    @property
    def output_size(self) -> tuple[int, int]:
        return _size_pair(self.size, "size")

    def params(self, seed: int, epoch: int, index: int, image_size: tuple[int, int]) -> Box:
        """The central box (the same for every seed, epoch and index); never flipped.

        torchvision's arithmetic (the resized size truncated, the crop offset rounded in
        resized pixels), mapped back to the stored pixels: the same pixels as torchvision's
        Resize + CenterCrop, in one resize.
        """
        height, width = _check_image_size(image_size)
        new_h, new_w = self._resized(height, width)
        top, box_h = _central(new_h, self.output_size[0], height / new_h)
        left, box_w = _central(new_w, self.output_size[1], width / new_w)
        return Box(top, left, box_h, box_w, False)

    def resize_then_crop(self, image_size: tuple[int, int]
                         ) -> tuple[tuple[int, int], int, int] | None:
        """torchvision's two steps in whole pixels: ((H, W) to resize the image to, top,
        left of the crop in the resized image); None where the crop is clamped to it.

        The same pixels as params' fractional box, but a resize of the whole image is
        torch's fast uint8 kernel, where a fractional box needs Pillow's slower one.
        """
        new_h, new_w = self._resized(*_check_image_size(image_size))
        out_h, out_w = self.output_size
        if out_h >= new_h or out_w >= new_w:
            return None
        return (new_h, new_w), round((new_h - out_h) / 2.0), round((new_w - out_w) / 2.0)

    def _resized(self, height: int, width: int) -> tuple[int, int]:
        """torchvision's Resize(resize): the shorter side to `resize`, the other truncated."""
        short = self.resize
        if short is None:
            return height, width
        if width <= height:
            return max(1, int(short * height / width)), short
        return short, max(1, int(short * width / height))


def _central(resized: int, out: int, back: float) -> tuple[float, float]:
    """(start, length) in stored pixels of the central `out` of `resized` pixels, clamped
    to the image (`back` stored pixels a resized one)."""
    if out >= resized:
        return 0, resized * back
    return round((resized - out) / 2.0) * back, out * back


Augment = RandomResizedCrop | CenterCrop


_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment


def _mix64(x: int) -> int:
    """splitmix64's finalizer: a bijection of 64-bit ints that spreads every input bit."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _key(*parts: int) -> int:
    """One 64-bit key from non-negative ints of any size (each folded 64 bits at a time)."""
    key = 0
    for part in parts:
        while True:
            key = _mix64(((key ^ (part & _MASK64)) + _GOLDEN) & _MASK64)
            part >>= 64
            if not part:
                break
    return key


class CropDraws:
    """The uniform draws of one sample's crop: a function of (seed, epoch, index) only.

    splitmix64 (Steele, Lea and Flood 2014) over a key of the arguments: the n-th draw is
    the finalizer of key + n * golden, so draws need no state beyond a counter and pass
    the usual statistical batteries; 53 bits of each make a float in [0, 1).
    """

    __slots__ = ("_state",)

    def __init__(self, seed: int, epoch: int, index: int) -> None:
        if seed < 0 or index < 0:
            raise ValueError(f"seed and index must be non-negative, not {seed} and {index}")
        self._state = _key(int(seed), check_epoch(epoch), int(index), CROP_STREAM)

    def _next(self) -> int:
        self._state = (self._state + _GOLDEN) & _MASK64
        return _mix64(self._state)

    def uniform(self, low: float, high: float) -> float:
        """A float in [low, high)."""
        return low + (high - low) * ((self._next() >> 11) * 2.0 ** -53)

    def integers(self, low: int, high: int) -> int:
        """An int in [low, high), high - low below 2**32 (the bias is below 2**-32)."""
        return low + (self._next() >> 32) * (high - low) // (1 << 32)


def sample_box(draws: CropDraws, image_size: tuple[int, int],
               scale: tuple[float, float], ratio: tuple[float, float]
               ) -> tuple[int, int, int, int]:
    """(top, left, height, width) by torchvision's RandomResizedCrop.get_params rule."""
    height, width = image_size
    area = height * width
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(MAX_TRIES):
        target_area = area * draws.uniform(scale[0], scale[1])
        aspect = math.exp(draws.uniform(log_low, log_high))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = draws.integers(0, height - h + 1)
            left = draws.integers(0, width - w + 1)
            return top, left, h, w
    return _central_fallback(height, width, ratio)


def _central_fallback(height: int, width: int,
                      ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """torchvision's fallback: the whole image, cut to the nearest allowed ratio."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w
