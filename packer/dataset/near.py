"""`pack dedup --near`: samples that look alike, by a 64-bit difference hash (dHash).

    dHash       the image as 9x8 grayscale (bilinear); bit (r, c) is 1 where pixel
                (r, c + 1) is brighter than (r, c): 64 bits that survive re-encoding,
                resizing and small colour changes, not crops, flips or rotations
    near        two samples whose hashes differ in at most `distance` bits (default 4)

Hashes are computed the first time a report asks, not at pack time (a conversion of
someone who never asks would pay a decode per image for them): one threaded pass like
`pack stats`, a JPEG decoded at 1/8 scale in the DCT domain (libjpeg-turbo, grayscale),
so the pass costs about a digest check per sample plus a tiny decode. They are then
kept in the dataset, `near-hashes.npy`, each beside the digest of the sample it was
computed from: a later report computes only the samples whose digest is not there
(an append's new samples, a --replace's replaced ones), and a folder it may not write
is reported on all the same.
Pairs are found without comparing all of them (multi-index hashing): the 64 bits are cut
into distance + 1 bands, and two hashes within `distance` bits agree exactly on at least
one band, so only samples that share a band value are compared. Groups are the connected
sets of near pairs (so a group's ends may differ by more than `distance`).
A flat image (one colour, a smooth sky: too little detail for its hash to mean anything)
is compared by colour instead, only with other flat images; each sample's detail, and a
flat one's colour thumbnail, are kept beside its hash.
"""

from __future__ import annotations

import contextlib
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from packer.core.index import DIGEST_BYTES, open_dataset
from packer.core.layout import NEAR_NAME
from packer.dataset.duplicates import DuplicateReport, equal_runs, make_group, split_numbers
from packer.dataset.flat import COLOUR_VALUES, FLAT_STEP, MIN_DETAIL, colour_links, colour_thumbnail
from packer.dataset.open import Opened, local_version, opened
from packer.dataset.stats_pass import damaged_sample, pixel_shape, thread_count
from packer.imaging.jpeg import decode_gray, fast_size
from packer.imaging.pillow import load_rgb
from packer.storage.files import write_atomic

__all__ = ["dhash", "near_duplicates", "near_pairs"]

CHUNK = 256
# near-hashes.npy; a column is named after what it holds: another hash (or another
# FLAT_STEP, MIN_DETAIL, COLOUR_SIZE), another name, and a file of other columns is
# computed again. rgb_2x2: a flat sample's colour thumbnail, zeros for the others.
KEPT_DTYPE = np.dtype([("digest", np.uint8, (DIGEST_BYTES,)), ("dhash_9x8", "<u8"),
                       ("detail_9x8", np.uint8), ("rgb_2x2", np.uint8, (COLOUR_VALUES,))])
HASH_SIZE = (9, 8)  # (width, height) of the grayscale image a dHash compares
MAX_DISTANCE = 16


def dhash(gray: Image.Image) -> tuple[int, int]:
    """The 64-bit difference hash of a grayscale image (module docstring) and its detail:
    of its 64 comparisons, those brighter by more than FLAT_STEP gray levels or those
    darker by as much, whichever are fewer."""
    small = np.asarray(gray.resize(HASH_SIZE, Image.Resampling.BILINEAR), dtype=np.int16)
    steps = small[:, 1:] - small[:, :-1]
    bits = (steps > 0).ravel()
    detail = min(np.count_nonzero(steps > FLAT_STEP), np.count_nonzero(steps < -FLAT_STEP))
    return int.from_bytes(np.packbits(bits).tobytes(), "big"), int(detail)


def _gray(data: bytes, shape: tuple[int, int] | None, i: int, entry: Opened) -> Image.Image:
    """Sample i as a grayscale image, as small as a JPEG's DCT scaling allows."""
    if shape is not None:  # npy: stored RGB pixels
        return Image.fromarray(np.frombuffer(data, np.uint8).reshape(*shape, 3)).convert("L")
    if fast_size(data) is not None:
        pixels = decode_gray(data, (HASH_SIZE[1], HASH_SIZE[0]))  # the coarsest scale
        if pixels is not None:  # else any libjpeg refusal: Pillow judges
            return Image.fromarray(pixels)
    try:
        return load_rgb(bytes(data)).convert("L")
    except Exception as exc:
        raise damaged_sample(entry, i, f"does not decode ({exc})") from exc


def hashes_of(folder: Path, workers: int | None = None) -> npt.NDArray[np.void]:
    """Every sample's row of KEPT_DTYPE (digest, dHash, detail, a flat one's colour),
    those not kept in near-hashes.npy computed on `workers` threads (default: one per
    CPU), then kept."""
    entry = opened(local_version(folder))
    n = entry.index.num_samples
    shape = pixel_shape(entry.index)
    out, todo = _kept(folder, np.asarray(entry.table.digests).reshape(n, -1))

    def chunk(start: int) -> None:
        stop = min(start + CHUNK, n)
        reader = entry.reader()
        for i, data in zip(range(start, stop), reader.read_range(start, stop), strict=True):
            if todo[i]:
                gray = _gray(data, shape, i, entry)
                out["dhash_9x8"][i], out["detail_9x8"][i] = dhash(gray)
                if out["detail_9x8"][i] < MIN_DETAIL:
                    out["rgb_2x2"][i] = colour_thumbnail(data, shape, gray)

    starts = [start for start in range(0, n, CHUNK) if todo[start : start + CHUNK].any()]
    with ThreadPoolExecutor(thread_count(workers), thread_name_prefix="pack-dhash") as pool:
        list(pool.map(chunk, starts))
    if starts:
        _keep(folder, out)
    return out


def _kept(folder: Path, digests: npt.NDArray[np.uint8]
          ) -> tuple[npt.NDArray[np.void], npt.NDArray[np.bool_]]:
    """(the rows near-hashes.npy holds for samples of the same digest, the others zeros
    but for their digest; which samples still need theirs computed)."""
    out = np.zeros(len(digests), KEPT_DTYPE)
    out["digest"] = digests
    todo = np.ones(len(digests), bool)
    try:
        kept = np.load(folder / NEAR_NAME, allow_pickle=False)
        if kept.dtype != KEPT_DTYPE or kept["digest"].shape[1:] != digests.shape[1:]:
            return out, todo  # another hash, or a file of other columns: computed again
    except (OSError, ValueError, EOFError):  # none yet, or damaged: computed again
        return out, todo
    m = min(len(kept), len(digests))
    same = np.flatnonzero(np.all(kept["digest"][:m] == digests[:m], axis=1))
    out[same] = kept[same]
    todo[same] = False
    return out, todo


def _keep(folder: Path, rows: npt.NDArray[np.void]) -> None:
    """Write near-hashes.npy atomically; a folder we may not write keeps none."""
    buffer = io.BytesIO()
    np.save(buffer, rows, allow_pickle=False)
    with contextlib.suppress(OSError):
        write_atomic(folder / NEAR_NAME, buffer.getvalue())


def near_pairs(hashes: npt.NDArray[np.uint64], distance: int) -> npt.NDArray[np.int64]:
    """(i, j), i < j, of every pair whose hashes differ in at most `distance` bits."""
    if not 0 <= distance <= MAX_DISTANCE:
        raise ValueError(f"--distance {distance}: use 0..{MAX_DISTANCE} bits of 64")
    edges = np.linspace(0, 64, distance + 2).astype(int)
    found: set[tuple[int, int]] = set()
    for low, high in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        band = (hashes >> np.uint64(low)) & np.uint64((1 << (high - low)) - 1)
        for members in equal_runs(band):
            found.update(_close(members, hashes, distance))
    return np.array(sorted(found), np.int64).reshape(-1, 2)


def _close(members: npt.NDArray[np.intp], hashes: npt.NDArray[np.uint64],
           distance: int) -> list[tuple[int, int]]:
    """The pairs of `members` (one band's bucket) within `distance` bits."""
    values = hashes[members]
    bits = np.bitwise_count(values[:, None] ^ values[None, :])
    rows, cols = np.nonzero(np.triu(bits <= distance, k=1))
    pairs = np.sort(np.stack([members[rows], members[cols]], axis=1), axis=1)
    return [(int(i), int(j)) for i, j in pairs.tolist()]


def components(pairs: npt.NDArray[np.int64], n: int) -> list[npt.NDArray[np.int64]]:
    """The connected sets of the pairs (union-find), each ascending, by first index."""
    parent = np.arange(n)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    for i, j in pairs.tolist():
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    touched = np.unique(pairs) if len(pairs) else np.zeros(0, np.int64)
    groups: dict[int, list[int]] = {}
    for i in touched.tolist():
        groups.setdefault(root(i), []).append(i)
    return [np.array(sorted(g), np.int64) for _, g in sorted(groups.items())]


def near_duplicates(path: str | Path, distance: int = 4,
                    workers: int | None = None) -> DuplicateReport:
    """Groups of samples of the dataset at `path` whose dHashes are within `distance`,
    flat samples grouped by colour among themselves."""
    folder = Path(path)
    index, table = open_dataset(folder)
    rows = hashes_of(folder, workers)
    is_flat = rows["detail_9x8"] < MIN_DETAIL
    flat, detailed = np.flatnonzero(is_flat), np.flatnonzero(~is_flat)
    pairs = np.concatenate([detailed[near_pairs(rows["dhash_9x8"][detailed], distance)],
                            flat[colour_links(rows["rgb_2x2"][flat])]])
    split_of, note = split_numbers(folder, index)
    groups = tuple(make_group(table, members, split_of, flat=bool(is_flat[members[0]]))
                   for members in components(pairs, index.num_samples))
    return DuplicateReport(str(folder), f"near (dHash within {distance} bits)",
                           index.num_samples, groups, note, num_flat=len(flat))
