"""`pack dedup`: samples whose stored bytes are equal, found by the digests of the table.

Exact duplicates cost no data read: every sample's xxh3-128 digest is in samples.npy, so
one sort of the digests groups them. A group lists its keys in index order, the first
being the one `pack convert --drop-duplicates` keeps. When DST/splits holds splits made
for the dataset as it is (`pack split`), each key's split is given and a group that
spans splits (a train image that is also in val) is flagged: that is the leak to fix
first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packer.core.index import Index, SampleTable, open_dataset
from packer.core.layout import SPLITS_DIR
from packer.dataset.splits import SPLIT_FILE, SPLIT_NAMES, load_subset
from packer.errors import PackError

__all__ = ["DuplicateGroup", "DuplicateReport", "equal_runs", "exact_duplicates", "groups_of",
           "make_group", "split_numbers"]


@dataclass(frozen=True)
class DuplicateGroup:
    """Samples with equal stored bytes: keys in index order, and each one's split."""

    keys: tuple[str, ...]
    indices: tuple[int, ...]
    splits: tuple[str, ...] | None  # None: the dataset has no (current) splits
    flat: bool = False  # near: samples too flat for a dHash, grouped by colour

    @property
    def across_splits(self) -> bool:
        return self.splits is not None and len(set(self.splits)) > 1


@dataclass(frozen=True)
class DuplicateReport:
    """Every group of duplicates in a dataset (`kind`: "exact" or "near")."""

    path: str
    kind: str
    num_samples: int
    groups: tuple[DuplicateGroup, ...]
    splits_note: str | None = None  # why splits are not shown, when DST/splits exists
    num_flat: int | None = None  # near: samples too flat for a dHash, compared by colour

    @property
    def num_duplicates(self) -> int:
        """Samples beyond the first of their group: what --drop-duplicates would drop."""
        return sum(len(group.keys) - 1 for group in self.groups)

    def to_json(self) -> dict[str, object]:
        flat = {} if self.num_flat is None else {"num_flat": self.num_flat}
        return {"path": self.path, "kind": self.kind, "num_samples": self.num_samples,
                "num_groups": len(self.groups), "num_duplicates": self.num_duplicates,
                "num_across_splits": sum(g.across_splits for g in self.groups),
                "splits_note": self.splits_note, **flat,
                "groups": [{"keys": list(g.keys), "indices": list(g.indices),
                            "splits": None if g.splits is None else list(g.splits),
                            "across_splits": g.across_splits,
                            **({"flat": True} if g.flat else {})} for g in self.groups]}


def exact_duplicates(path: str | Path) -> DuplicateReport:
    """The groups of samples of the dataset at `path` with equal stored-bytes digests."""
    folder = Path(path)
    index, table = open_dataset(folder)
    digests = np.ascontiguousarray(table.digests).view(np.dtype((np.void, 16))).ravel()
    members = groups_of(digests)
    split_of, note = split_numbers(folder, index)
    return DuplicateReport(str(folder), "exact", index.num_samples,
                           tuple(make_group(table, m, split_of) for m in members), note)


def groups_of(values: npt.NDArray[np.void] | npt.NDArray[np.uint64]
              ) -> list[npt.NDArray[np.int64]]:
    """Indices of each run of equal values with more than one member, each ascending,
    the groups ordered by their first index."""
    found = [np.sort(members).astype(np.int64) for members in equal_runs(values)]
    return sorted(found, key=lambda group: int(group[0]))


def equal_runs(values: npt.NDArray[np.void] | npt.NDArray[np.uint64]
               ) -> list[npt.NDArray[np.intp]]:
    """The indices of each set of equal values with more than one member (unsorted)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    stops = np.append(starts[1:], len(values))
    return [order[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
            if b - a > 1]


def make_group(table: SampleTable, members: npt.NDArray[np.int64],
               split_of: npt.NDArray[np.int8] | None, *, flat: bool = False) -> DuplicateGroup:
    indices = tuple(members.tolist())
    splits = None if split_of is None else tuple(SPLIT_NAMES[split_of[i]] for i in indices)
    return DuplicateGroup(tuple(table.key(i) for i in indices), indices, splits, flat)


def split_numbers(folder: Path, index: Index) -> tuple[npt.NDArray[np.int8] | None, str | None]:
    """Each sample's split number (SPLIT_NAMES), when DST/splits is current; else why not."""
    if not (folder / SPLITS_DIR / SPLIT_FILE).is_file():
        return None, None
    split_of = np.full(index.num_samples, -1, np.int8)
    for number, name in enumerate(SPLIT_NAMES):
        try:
            split_of[load_subset(folder, index, name)] = number
        except PackError as exc:  # stale or damaged: say so, report without splits
            return None, str(exc)
        except ValueError:  # no such split (no test fraction)
            continue
    return split_of, None
