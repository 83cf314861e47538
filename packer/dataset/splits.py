"""`pack split` / `packer.split`: deterministic train/val/test splits by key hash.

    DST/splits/split.json   seed, fractions, stratify, the thresholds, and the dataset
                            (num_samples, table digest) the index files were made for
    DST/splits/train.npy    int64 sample indices, ascending; val.npy, test.npy alike
                            (test.npy only with a test fraction)

No data is copied: readers open a split with `split="val"` (readers.PackedDataset,
readers.PackedIterableDataset).

Which split a sample is in depends on h = xxh3_64(key, seed) and a pair of thresholds
(t_val, t_test) of its group: val if h < t_val, test if t_val <= h < t_test, else train.
The group is the sample's label with `stratify`, else the whole dataset. When a group
is first split, its thresholds are the hashes of rank round(val * n) and
round((val + test) * n) among its n samples, so each group (each label, stratified)
gets its fraction exactly, within rounding. split.json keeps the thresholds, and a
rerun with the same settings (after `pack append`, say) reuses them: a sample's split
is then a pure function of (seed, key) and never changes; new samples fall on either
side of the same thresholds, so a group's fraction drifts only by the new samples'
chance (binomial) spread. That is the trade-off, chosen for stability: exact
per-label fractions at every rerun would need new thresholds, which move old samples
between train and val (a leak). A new label gets its own thresholds when it first
appears. Other settings (another seed or fraction) need `force=True` and re-split
everything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from packer.core.index import TABLE_DIGEST, Index, SampleTable, open_dataset
from packer.core.layout import SPLITS_DIR
from packer.errors import BadInputError, CorruptDatasetError, IncompleteDatasetError
from packer.storage.files import atomic_writer, write_atomic

__all__ = ["SPLIT_FILE", "SPLIT_NAMES", "SplitReport", "load_subset", "split"]

SPLIT_FILE = "split.json"
SPLIT_NAMES = ("train", "val", "test")
ALL = "all"  # the one group without stratify
TOP = 1 << 64  # a threshold above every hash


@dataclass(frozen=True)
class SplitReport:
    """What `split` wrote: samples per split, per group, and whether thresholds were kept."""

    folder: str
    counts: dict[str, int]
    group_counts: dict[str, dict[str, int]]  # group (label name, or "all") -> split -> n
    kept_thresholds: int  # groups whose thresholds came from the earlier split.json
    settings: dict[str, Any]


def key_hashes(table: SampleTable, seed: int) -> npt.NDArray[np.uint64]:
    """xxh3_64 of every sample's UTF-8 key with `seed`: what decides its split."""
    digest = xxhash.xxh3_64_intdigest
    keys = table.key_bytes_many(range(len(table)))
    return np.fromiter((digest(key, seed) for key in keys), np.uint64, len(keys))


def split(path: str | Path, val: float, test: float = 0.0, *, stratify: bool = False,
          seed: int = 0, force: bool = False) -> SplitReport:
    """Write DST/splits (module docstring); returns the counts."""
    _check_settings(val, test, seed)
    folder = Path(path)
    index, table = open_dataset(folder)
    settings = {"seed": seed, "val": val, "test": test, "stratify": stratify}
    earlier = _earlier_thresholds(folder, settings, force)
    hashes = key_hashes(table, seed)
    labels = np.asarray(table.labels)
    groups = _groups(index, labels, stratify)
    thresholds = {name: earlier.get(name) or _thresholds(hashes[members], val, test)
                  for name, members in groups.items()}
    which = np.zeros(len(hashes), np.int8)  # 0 train, 1 val, 2 test
    for name, members in groups.items():
        which[members] = _assign(hashes[members], thresholds[name])
    names = SPLIT_NAMES if test > 0 else SPLIT_NAMES[:2]
    indices = {s: np.flatnonzero(which == k).astype(np.int64) for k, s in enumerate(names)}
    _write(folder, index, settings, thresholds, indices)
    return SplitReport(
        str(folder), {name: len(v) for name, v in indices.items()},
        {name: {s: int(np.count_nonzero(which[members] == k)) for k, s in enumerate(names)}
         for name, members in groups.items()},
        sum(name in earlier for name in groups), settings)


def _check_settings(val: float, test: float, seed: int) -> None:
    if not (0 <= val < 1 and 0 <= test < 1 and val + test < 1):
        raise ValueError(f"--val {val} and --test {test}: each in [0, 1), together below 1 "
                         "(what is left is train)")
    if not 0 <= seed < TOP:
        raise ValueError(f"--seed {seed}: use an integer in 0..2**64-1")


def _groups(index: Index, labels: npt.NDArray[np.int64],
            stratify: bool) -> dict[str, npt.NDArray[np.int64]]:
    """Sample indices of each group: per label name with `stratify`, else one group."""
    if not stratify:
        return {ALL: np.arange(len(labels), dtype=np.int64)}
    return {name: members for c, name in enumerate(index.class_names)
            if len(members := np.flatnonzero(labels == c))}


def _thresholds(hashes: npt.NDArray[np.uint64], val: float, test: float) -> tuple[int, int]:
    """(t_val, t_test): the hashes of rank round(val n) and round((val + test) n)."""
    ordered = np.sort(hashes)
    n = len(ordered)

    def at(fraction: float) -> int:
        rank = math.floor(fraction * n + 0.5)
        return int(ordered[rank]) if rank < n else TOP

    return at(val), at(val + test)


def _assign(hashes: npt.NDArray[np.uint64], pair: tuple[int, int]) -> npt.NDArray[np.int8]:
    """1 (val) below t_val, 2 (test) below t_test, else 0 (train); TOP is above every hash."""
    below = [hashes < np.uint64(t) if t < TOP else np.ones(len(hashes), bool) for t in pair]
    return np.where(below[0], 1, np.where(below[1], 2, 0)).astype(np.int8)


def _earlier_thresholds(folder: Path, settings: dict[str, Any],
                        force: bool) -> dict[str, tuple[int, int]]:
    """The thresholds of an earlier split of `folder` with the same settings ({} if none,
    or with `force`); other settings without `force` are refused."""
    path = folder / SPLITS_DIR / SPLIT_FILE
    if force or not path.is_file():
        return {}
    meta = _read_meta(path)
    if meta.get("settings") != settings:
        raise BadInputError(f"{path.parent}: made with {_spell(meta.get('settings'))}; other "
                            "settings would move samples between splits: pass --force to "
                            "re-split everything")
    return {name: (int(pair[0]), int(pair[1])) for name, pair in meta["thresholds"].items()}


def _spell(settings: Any) -> str:
    if not isinstance(settings, dict):
        return "unknown settings"
    return (f"--val {settings.get('val')} --test {settings.get('test')} --seed "
            f"{settings.get('seed')}" + (" --stratify" if settings.get("stratify") else ""))


def _write(folder: Path, index: Index, settings: dict[str, Any],
           thresholds: dict[str, tuple[int, int]],
           indices: dict[str, npt.NDArray[np.int64]]) -> None:
    """The index files first, split.json last: it names the dataset they were made for."""
    out = folder / SPLITS_DIR
    out.mkdir(exist_ok=True)
    for stale in out.glob("*.npy"):
        if stale.stem not in indices:
            stale.unlink()
    for name, values in indices.items():
        with atomic_writer(out / f"{name}.npy") as handle:
            np.save(handle, values)
    meta = {"settings": settings, "splits": list(indices),
            "counts": {name: len(v) for name, v in indices.items()},
            "num_samples": index.num_samples, "table_digest": index.extra.get(TABLE_DIGEST),
            "thresholds": {name: list(pair) for name, pair in thresholds.items()}}
    text = json.dumps(meta, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    write_atomic(out / SPLIT_FILE, text.encode("utf-8"))


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptDatasetError(f"{path}: unreadable ({exc}); rerun `pack split` with "
                                  "--force") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("thresholds"), dict):
        raise CorruptDatasetError(f"{path}: not a split.json; rerun `pack split` with --force")
    return meta


def load_subset(folder: Path, index: Index, name: str) -> npt.NDArray[np.int64]:
    """The sample indices of split `name` of the dataset at `folder`, checked to be made
    for this dataset as it is now (a dataset appended to since must be split again)."""
    path = folder / SPLITS_DIR / SPLIT_FILE
    if not path.is_file():
        raise IncompleteDatasetError(f"{folder}: no splits (no {SPLITS_DIR}/{SPLIT_FILE}); "
                                     f"run `pack split {folder} --val 0.05` first")
    meta = _read_meta(path)
    if name not in meta.get("splits", ()):
        raise ValueError(f"subset {name!r}: {folder / SPLITS_DIR} has "
                         f"{', '.join(meta.get('splits', ())) or 'no splits'}")
    if meta.get("num_samples") != index.num_samples or \
            meta.get("table_digest") != index.extra.get(TABLE_DIGEST):
        raise IncompleteDatasetError(
            f"{folder / SPLITS_DIR}: made for {meta.get('num_samples')} samples, the dataset "
            f"now has {index.num_samples} (changed since): rerun `pack split {folder} "
            f"{_spell(meta.get('settings'))}` (samples already split stay where they are)")
    try:
        values = np.load(folder / SPLITS_DIR / f"{name}.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CorruptDatasetError(f"{folder / SPLITS_DIR / name}.npy: unreadable ({exc}); "
                                  "rerun `pack split` with --force") from exc
    values = np.asarray(values, dtype=np.int64)
    if values.ndim != 1 or (len(values) and (values[0] < 0 or values[-1] >= index.num_samples
                                             or np.any(np.diff(values) <= 0))):
        raise CorruptDatasetError(f"{folder / SPLITS_DIR / name}.npy: not ascending sample "
                                  "indices of this dataset; rerun `pack split` with --force")
    return values
