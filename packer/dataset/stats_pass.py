"""The one parallel pass behind `pack stats`: every sample read, decoded and tallied once.

Work is cut into chunks of CHUNK consecutive samples, read with `read_range` (one large
read per tar span, as `pack verify` reads) on a pool of threads: libjpeg-turbo
(simplejpeg), Pillow's decoders and the numpy reductions all release the GIL, so threads
scale without pickling pixels between processes. Each chunk returns a `Tally`; tallies
add up in any order, so the result does not depend on the number of threads.

`decode` (a mask, one flag per sample) limits the decode to some samples (`pack stats
--pixel-samples N`); the others' sizes come from their headers (libjpeg-turbo's, or
Pillow's lazy open with the EXIF orientation applied), at about the cost of `pack
verify`'s digest check.

Pixels are the stored ones, decoded to RGB at their stored size exactly as the readers'
`decode(data, "rgb8")` decodes them (libjpeg-turbo where it may, else Pillow; npy rows
are the pixels themselves). Sums are exact integers: a channel's sum of squares of uint8
values fits a uint16 per pixel and a uint32 per column.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packer.core.index import Index
from packer.dataset.open import Opened, local_version, opened
from packer.errors import CorruptDatasetError
from packer.imaging.jpeg import decode_scaled, fast_size
from packer.imaging.pillow import load_rgb, open_image, oriented_size

CHUNK = 256  # samples a task reads and tallies
COUNTED_TYPES = ("str", "int")  # fields whose values are counted (categorical)
MAX_DISTINCT = 1000  # a field with more distinct values is not categorical: not counted
COLUMN_ROWS = 60_000  # rows a uint32 column sum of squares holds (65025 * 66051 < 2**32)


@dataclass
class Tally:
    """What a chunk of samples adds: pixel sums, per-sample sizes, field value counts."""

    sums: list[int] = field(default_factory=lambda: [0, 0, 0])
    squares: list[int] = field(default_factory=lambda: [0, 0, 0])
    num_pixels: int = 0
    values: dict[str, Counter[bytes]] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        for c in range(3):
            self.sums[c] += other.sums[c]
            self.squares[c] += other.squares[c]
        self.num_pixels += other.num_pixels
        for name, counts in other.values.items():
            self.values.setdefault(name, Counter()).update(counts)


@dataclass
class PassResult:
    """The whole pass: the summed tally and one width, height and byte size per sample."""

    tally: Tally
    widths: npt.NDArray[np.int64]
    heights: npt.NDArray[np.int64]
    num_bytes: npt.NDArray[np.int64]
    uncounted: frozenset[str]  # counted-type fields with more than MAX_DISTINCT values


def run_pass(folder: Path, index: Index, workers: int | None = None,
             decode: npt.NDArray[np.bool_] | None = None) -> PassResult:
    """Read and tally every sample of `folder` on `workers` threads (default: CPUs),
    decoding those `decode` marks (default: all)."""
    n = index.num_samples
    result = PassResult(Tally(), np.zeros(n, np.int64), np.zeros(n, np.int64),
                        np.zeros(n, np.int64), frozenset())
    entry = opened(local_version(folder))
    counted = [(k, spec.name) for k, spec in enumerate(index.fields)
               if spec.type in COUNTED_TYPES]
    uncounted: set[str] = set()
    with ThreadPoolExecutor(thread_count(workers), thread_name_prefix="pack-stats") as pool:
        for tally in pool.map(lambda s: _chunk(entry, s, min(s + CHUNK, n), result, counted,
                                               decode), range(0, n, CHUNK)):
            result.tally.add(tally)
            uncounted.update(name for name, counts in result.tally.values.items()
                             if len(counts) > MAX_DISTINCT)
            for name in uncounted:  # past MAX_DISTINCT values: not categorical, not kept
                result.tally.values.pop(name, None)
    result.uncounted = frozenset(uncounted)
    return result


def thread_count(workers: int | None) -> int:
    """The threads of a pass: `workers`, default one per CPU, at least one."""
    return max(1, workers if workers is not None else os.cpu_count() or 1)


def pixel_shape(index: Index) -> tuple[int, int] | None:
    """(H, W) of the samples when they are stored as raw RGB pixels (npy), else None."""
    return index.image_size if index.encode.get("mode") == "pixels" else None


def damaged_sample(entry: Opened, i: int, what: str) -> CorruptDatasetError:
    """Sample i cannot be read as an image (`what`: how it fails, with the codec's word)."""
    return CorruptDatasetError(f"{entry.folder}: sample {i} ({entry.table.key(i)!r}) {what}; "
                               "reconvert the dataset")


def _chunk(entry: Opened, start: int, stop: int, out: PassResult,
           counted: list[tuple[int, str]], decode: npt.NDArray[np.bool_] | None) -> Tally:
    """Tally samples start..stop-1 and write their sizes into `out` (disjoint slices)."""
    reader = entry.reader()
    tally = Tally()
    shape = pixel_shape(entry.index)
    wanted = [True] * (stop - start) if decode is None else decode[start:stop].tolist()
    for i, data, decoded in zip(range(start, stop), reader.read_range(start, stop), wanted,
                                strict=True):
        out.num_bytes[i] = len(data)
        if decoded:
            pixels = _pixels(data, shape, i, entry)
            out.heights[i], out.widths[i] = pixels.shape[:2]
            _add_pixels(tally, pixels)
        else:
            out.heights[i], out.widths[i] = shape or _header_size(data, i, entry)
    if counted:
        rows = reader.field_values_many(list(range(start, stop)))
        for k, name in counted:
            tally.values[name] = Counter(value for row in rows
                                         if (value := row[k]) is not None)
    return tally


def _pixels(data: bytes, shape: tuple[int, int] | None, i: int,
            entry: Opened) -> npt.NDArray[np.uint8]:
    """Sample i's stored pixels as (H, W, 3) uint8, decoded as the readers decode them."""
    if shape is not None:
        return np.frombuffer(data, np.uint8).reshape(*shape, 3)
    full = fast_size(data)
    if full is not None:
        pixels = decode_scaled(data, full, 1)
        if pixels is not None:
            return pixels
    try:
        return np.asarray(load_rgb(bytes(data)))
    except Exception as exc:  # any codec's refusal: name the sample
        raise damaged_sample(entry, i, f"does not decode ({exc})") from exc


def _header_size(data: bytes, i: int, entry: Opened) -> tuple[int, int]:
    """(H, W) of sample i as decoded, from its header: upright (EXIF applied)."""
    fast = fast_size(data)
    if fast is not None:
        return fast
    try:
        width, height = oriented_size(open_image(bytes(data)))
    except Exception as exc:  # any codec's refusal: name the sample
        raise damaged_sample(entry, i, f"has no readable header ({exc})") from exc
    return height, width


def _add_pixels(tally: Tally, pixels: npt.NDArray[np.uint8]) -> None:
    """Add an image's per-channel sums and sums of squares, exactly (module docstring)."""
    height, width = pixels.shape[:2]
    flat = pixels.reshape(height, width * 3)
    for rows in (flat[start : start + COLUMN_ROWS] for start in range(0, height, COLUMN_ROWS)):
        column_sums = np.add.reduce(rows, axis=0, dtype=np.uint32)
        column_squares = np.add.reduce(np.multiply(rows, rows, dtype=np.uint16), axis=0,
                                       dtype=np.uint32)
        sums = column_sums.reshape(width, 3).sum(axis=0, dtype=np.uint64).tolist()
        squares = column_squares.reshape(width, 3).sum(axis=0, dtype=np.uint64).tolist()
        for c in range(3):
            tally.sums[c] += sums[c]
            tally.squares[c] += squares[c]
    tally.num_pixels += height * width

