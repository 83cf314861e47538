"""`pack dedup --near` for flat images: those with too little detail for a dHash.

A dHash compares neighbouring pixels of the 9x8 grayscale image; where they are equal
the bit is 0, so a flat image (one colour, a white page) hashes to zeros, or nearly,
whatever its colour or size, and so does one that only darkens left to right (a sky, a
smooth gradient): every such image would be near every other one. A hash tells images
apart by where it has 1s and where 0s, so each sample's *detail* is kept beside its hash:

    detail      of the 64 comparisons, those brighter by more than FLAT_STEP gray levels
                or those darker by as much, whichever are fewer
    flat        detail below MIN_DETAIL: the hash says too little to compare by it

A flat sample is compared by colour instead, and only with other flat samples: its 2x2
RGB thumbnail (an area average), two being near when every one of the 12 values differs
by at most COLOUR_TOLERANCE. A red image is never near a white one; a near copy of a
flat image (re-encoded, resized) stays near it; two flat images of the same colour are
near whatever their sizes. A flat sample and a detailed one are never near.

Pairs of flat samples are found without comparing all of them: identical thumbnails are
linked to the first sample that has it, then the distinct thumbnails, sorted by their
first value, are compared only with those whose first value is within the tolerance.
The links are enough for the groups (connected sets), not a list of every near pair.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from PIL import Image

from packer.imaging.pillow import load_rgb

__all__ = ["COLOUR_SIZE", "COLOUR_TOLERANCE", "FLAT_STEP", "MIN_DETAIL", "colour_links",
           "colour_thumbnail"]

FLAT_STEP = 2  # gray levels (of 255) a comparison must differ by to count as detail
MIN_DETAIL = 4  # detail (comparisons decided each way) below which a sample is flat
COLOUR_SIZE = (2, 2)  # (width, height) of a flat sample's RGB thumbnail
COLOUR_VALUES = COLOUR_SIZE[0] * COLOUR_SIZE[1] * 3
COLOUR_TOLERANCE = 8  # the most a value of two near flat samples' thumbnails may differ by
DRAFT_SCALE = 1 / 8  # a JPEG decodes at 1/8 in the DCT domain: a thumbnail needs no more


def colour_thumbnail(data: bytes, shape: tuple[int, int] | None,
                     gray: Image.Image) -> npt.NDArray[np.uint8]:
    """The 12 values of a sample's 2x2 RGB thumbnail. `shape`: (H, W) of stored RGB
    pixels (npy), else `data` is an encoded image; one Pillow cannot decode in colour
    (the grayscale decode took it) gives its grayscale image's thumbnail."""
    if shape is not None:
        image = Image.fromarray(np.frombuffer(data, np.uint8).reshape(*shape, 3))
    else:
        image = _decoded(bytes(data)) or gray.convert("RGB")
    small = image.resize(COLOUR_SIZE, Image.Resampling.BOX)
    return np.asarray(small, np.uint8).reshape(COLOUR_VALUES)


def _decoded(data: bytes) -> Image.Image | None:
    """`data` as an upright RGB image, at 1/8 scale where a JPEG allows it; None if
    Pillow refuses it both scaled (a lossless JPEG refuses DCT scaling) and whole."""
    for scale in (DRAFT_SCALE, 1.0):
        try:
            return load_rgb(data, scale)
        except Exception:  # any codec's refusal: the next way, then the gray image
            continue
    return None


def colour_links(thumbs: npt.NDArray[np.uint8], tolerance: int = COLOUR_TOLERANCE
                 ) -> npt.NDArray[np.int64]:
    """(i, j), i < j, rows of `thumbs` (N, 12) linked so that the connected sets are
    those of the pairs whose values all differ by at most `tolerance` (module docstring)."""
    if len(thumbs) < 2:
        return np.zeros((0, 2), np.int64)
    unique, first, inverse = np.unique(thumbs, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    same = np.stack([first[inverse], np.arange(len(thumbs))], axis=1)
    links = [same[same[:, 0] != same[:, 1]]]
    values = unique.astype(np.int16)  # np.unique sorts rows: the first value ascends
    ends = np.searchsorted(values[:, 0], values[:, 0] + tolerance, side="right")
    for a, end in enumerate(ends.tolist()):
        if end - a > 1:
            close = np.abs(values[a + 1 : end] - values[a]).max(axis=1) <= tolerance
            partners = first[a + 1 + np.flatnonzero(close)]
            links.append(np.stack([np.full(len(partners), first[a]), partners], axis=1))
    found = np.sort(np.concatenate(links).astype(np.int64), axis=1)
    return found.reshape(-1, 2)
