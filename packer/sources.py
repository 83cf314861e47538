"""The scan's items, stored compactly: no Python object per item until one is asked for.

    Strings       one UTF-8 byte blob + a start and stop per string (numpy arrays)
    SourceItems   keys, paths (a common prefix + tails) and labels of the sorted items;
                  a Sequence[SourceItem] that builds each SourceItem when it is read,
                  and whose slices are views (positions stay those of the whole scan)
    ItemsBuilder  collects rows while a scan walks, then sorts them by (key, path)

A list of SourceItem costs ~400 bytes an item (the object, a path and a key string,
list slots); these arrays cost the bytes of the key and path plus ~40, so the memory
of a conversion stays flat as the source grows. Sorting never makes a string per item
either: numpy sorts a fixed-width prefix of each key, and only rows whose prefixes tie
are compared in Python.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from packer.record import Origin, Reject, SourceItem

Int64s = npt.NDArray[np.int64]
UTF8 = ("utf-8", "surrogatepass")  # manifests may name lone surrogates; keep them as they are
SORT_PREFIX = 64  # key bytes numpy sorts by; longer keys that tie are compared in Python
CHUNK = 1024  # items materialized per step when iterating


class Strings:
    """Variable-length strings: one UTF-8 blob, string i is data[starts[i]:stops[i]].

    The blob is a `bytes` object (slicing and decoding it is the fastest way to make
    a str), seen by numpy as `blob` for the vectorized work.
    """

    __slots__ = ("blob", "data", "starts", "stops")

    def __init__(self, data: bytes, starts: Int64s, stops: Int64s) -> None:
        self.data = data
        self.blob = np.frombuffer(data, np.uint8)
        self.starts = starts
        self.stops = stops

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.stops[i])]

    def text(self, i: int) -> str:
        return self.raw(i).decode(*UTF8)

    def texts(self, lo: int, hi: int) -> list[str]:
        data = self.data
        bounds = list(zip(self.starts[lo:hi].tolist(), self.stops[lo:hi].tolist(), strict=True))
        try:  # strict UTF-8 decodes ~3x faster than with an error handler
            return [data[a:b].decode() for a, b in bounds]
        except UnicodeDecodeError:
            return [data[a:b].decode(*UTF8) for a, b in bounds]

    def take(self, rows: slice | npt.NDArray[Any]) -> Strings:
        """A subset sharing the blob."""
        return Strings(self.data, self.starts[rows], self.stops[rows])

    def compact(self) -> Strings:
        """A copy holding only the bytes of these strings (what pickling sends)."""
        data = self.data
        pieces = [data[a:b] for a, b in zip(self.starts.tolist(), self.stops.tolist(),
                                            strict=True)]
        stops = np.cumsum([len(p) for p in pieces], dtype=np.int64)
        starts = np.concatenate([[0], stops[:-1]]).astype(np.int64)
        return Strings(b"".join(pieces), starts, stops)

    def __reduce__(self) -> tuple[Any, ...]:
        small = self.compact()
        return Strings, (small.data, small.starts, small.stops)


class SourceItems(Sequence[SourceItem]):
    """The sorted items of a scan; item i has position `first + i`.

    An item's path is `prefix` + its entry in `paths`, or `prefix` + its key when
    `paths` is None (the samples of a packed dataset).
    """

    def __init__(self, prefix: str, keys: Strings, paths: Strings | None, labels: Int64s,
                 origin: Origin | None = None, first: int = 0) -> None:
        self.prefix = prefix
        self.keys = keys
        self.paths = paths
        self.labels = labels
        self.origin = origin
        self.first = first

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> SourceItem: ...

    @overload
    def __getitem__(self, index: slice) -> SourceItems: ...

    def __getitem__(self, index: int | slice) -> SourceItem | SourceItems:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("SourceItems slices take every item (step 1)")
            rows = slice(start, max(start, stop))
            paths = self.paths.take(rows) if self.paths is not None else None
            return SourceItems(self.prefix, self.keys.take(rows), paths, self.labels[rows],
                               self.origin, self.first + start)
        i = range(len(self))[index]  # negative indices, IndexError
        key = self.keys.text(i)
        tail = self.paths.text(i) if self.paths is not None else key
        return SourceItem(self.first + i, self.prefix + tail, key, int(self.labels[i]),
                          self.origin)

    def __iter__(self) -> Iterator[SourceItem]:
        origin, first = self.origin, self.first
        for j, (key, path, label) in enumerate(self.rows()):
            yield SourceItem(first + j, path, key, label, origin)

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """(key, path, label) of each item, without building SourceItem objects."""
        prefix = self.prefix
        for lo in range(0, len(self), CHUNK):
            hi = min(lo + CHUNK, len(self))
            keys = self.keys.texts(lo, hi)
            tails = self.paths.texts(lo, hi) if self.paths is not None else keys
            for key, tail, label in zip(keys, tails, self.labels[lo:hi].tolist(), strict=True):
                yield key, prefix + tail, label

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (a batch sent to a worker process) with only the bytes of its own items."""
        labels = np.array(self.labels, dtype=np.int64)
        return SourceItems, (self.prefix, self.keys, self.paths, labels, self.origin,
                             self.first)

    def __repr__(self) -> str:
        return f"SourceItems({len(self)} items from position {self.first})"


class ItemsBuilder:
    """Rows (key, path tail, label) appended in any order; `build` sorts them by key.

    Paths are stored without `prefix` (the scan root), which every path shares.
    """

    def __init__(self, prefix: str, errors: str = "surrogatepass") -> None:
        self.prefix = prefix
        self.errors = errors
        self._keys = bytearray()
        self._key_stops = array("q")
        self._paths = bytearray()
        self._path_stops = array("q")
        self._labels = array("q")

    def __len__(self) -> int:
        return len(self._labels)

    def add(self, key: str, tail: str, label: int) -> None:
        """Add a row; raises UnicodeEncodeError (and adds nothing) for an unencodable name."""
        key_bytes = key.encode("utf-8", self.errors)
        tail_bytes = tail.encode("utf-8", self.errors)
        self._keys += key_bytes
        self._key_stops.append(len(self._keys))
        self._paths += tail_bytes
        self._path_stops.append(len(self._paths))
        self._labels.append(label)

    def build(self, rejects: list[Reject]) -> SourceItems:
        """Sort by (key, path); a row whose key an earlier row has becomes a reject."""
        keys = _strings(self._keys, self._key_stops)
        paths = _strings(self._paths, self._path_stops)
        labels = np.array(self._labels, dtype=np.int64)
        self._keys, self._paths = bytearray(), bytearray()  # copied into `bytes` above
        order, repeats = sorted_order(keys, paths)
        for row in order[repeats].tolist():
            key = keys.text(row)
            rejects.append(Reject(-1, self.prefix + paths.text(row),
                                  f"duplicate key {key!r}: another file has that name"))
        order = order[~repeats]
        return SourceItems(self.prefix, keys.take(order), paths.take(order), labels[order])


def _strings(blob: bytearray, stops: array[int]) -> Strings:
    ends = np.array(stops, dtype=np.int64)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    return Strings(bytes(blob), starts, ends)


def sorted_order(keys: Strings, paths: Strings) -> tuple[npt.NDArray[np.intp],
                                                          npt.NDArray[np.bool_]]:
    """Rows in (key, path) order, as Python sorts the strings, and which rows repeat a key.

    UTF-8 byte order is code point order, so bytes sort like the strings. numpy sorts
    the first SORT_PREFIX bytes of every key; rows whose prefixes tie (long keys that
    share a prefix, or equal keys) are sorted in Python by their whole key and path.
    `repeats` is indexed like the returned order.
    """
    count = len(keys)
    repeats = np.zeros(count, dtype=np.bool_)
    if count == 0:
        return np.zeros(0, np.intp), repeats
    lengths = keys.stops - keys.starts
    width = max(1, min(int(lengths.max()), SORT_PREFIX))
    table = np.zeros((count, width), np.uint8)
    for column in range(width):  # one vectorized pass per byte column, no object per row
        rows = np.flatnonzero(lengths > column)
        table[rows, column] = keys.blob[keys.starts[rows] + column]
    prefixes = table.view(f"S{width}").ravel()
    order = np.argsort(prefixes, kind="stable")
    ranked = prefixes[order]
    del table, prefixes
    ties = np.concatenate([[0], (ranked[1:] == ranked[:-1]).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(ties)).tolist()
    for lo, hi in zip(edges[::2], edges[1::2], strict=True):  # ranked[lo..hi] tie
        run = sorted(order[lo : hi + 1].tolist(), key=lambda row: (keys.raw(row), paths.raw(row)))
        order[lo : hi + 1] = run
        for offset in range(1, len(run)):
            if keys.raw(run[offset]) == keys.raw(run[offset - 1]):
                repeats[lo + offset] = True
    return order, repeats
