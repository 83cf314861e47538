"""The scan's items, stored compactly: no Python object per item until one is asked for.

A list of SourceItem costs several Python objects an item; `SourceItems` (numpy arrays,
strings in one UTF-8 blob) costs the bytes of the key and path plus a few numbers, so a
conversion's memory stays flat as the source grows. `ItemsBuilder` collects the rows of
a scan and sorts them without making a string per item either.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from packer.core.record import Origin, Reject, SourceItem

Int64s = npt.NDArray[np.int64]
UTF8 = ("utf-8", "surrogatepass")  # manifests may name lone surrogates; keep them as they are
SORT_PREFIX = 64  # key bytes numpy sorts by; longer keys that tie are compared in Python
CHUNK = 1024  # items materialized per step when iterating
ALL = slice(None)


class Strings:
    """Variable-length strings: one UTF-8 blob, string i is data[starts[i]:stops[i]]; the
    blob is `bytes` (it makes a str fastest), seen by numpy as `blob` for vectorized work."""

    __slots__ = ("blob", "data", "starts", "stops")

    def __init__(self, data: bytes, starts: Int64s, stops: Int64s) -> None:
        self.data = data
        self.blob = np.frombuffer(data, np.uint8)
        self.starts = starts
        self.stops = stops

    @classmethod
    def joined(cls, pieces: Iterator[bytes], lengths: Int64s) -> Strings:
        """Strings laid back to back, from the pieces and their lengths."""
        bounds = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        return cls(b"".join(pieces), bounds[:-1], bounds[1:])

    def __len__(self) -> int:
        return len(self.starts)

    def raw(self, i: int) -> bytes:
        return self.data[int(self.starts[i]) : int(self.stops[i])]

    def text(self, i: int) -> str:
        return self.raw(i).decode(*UTF8)

    def texts(self, lo: int, hi: int) -> list[str]:
        data = self.data
        bounds = list(zip(self.starts[lo:hi].tolist(), self.stops[lo:hi].tolist(), strict=True))
        try:  # strict UTF-8 decodes faster than with an error handler
            return [data[a:b].decode() for a, b in bounds]
        except UnicodeDecodeError:
            return [data[a:b].decode(*UTF8) for a, b in bounds]

    def take(self, rows: slice | npt.NDArray[Any]) -> Strings:
        """A subset sharing the blob."""
        return Strings(self.data, self.starts[rows], self.stops[rows])

    def compacted(self, rows: slice | npt.NDArray[Any] = ALL) -> Strings:
        """A copy holding only the bytes of these rows, back to back, in their order."""
        starts, stops, data = self.starts[rows], self.stops[rows], self.data
        pieces = (b"".join([data[a:b] for a, b in zip(starts[lo : lo + CHUNK].tolist(),
                                                      stops[lo : lo + CHUNK].tolist(),
                                                      strict=True)])
                  for lo in range(0, len(starts), CHUNK))  # a chunk at a time: no object a string
        return Strings.joined(pieces, stops - starts)

    def tail(self, i: int, key: str) -> str:
        return self.text(i)

    def tails(self, lo: int, hi: int, keys: list[str]) -> list[str]:
        return self.texts(lo, hi)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (a batch sent to a worker process) with only the bytes of its strings."""
        small = self.compacted()
        return Strings, (small.data, small.starts, small.stops)


class Suffixes:
    """Path tails that are the key plus one of a few suffixes (an image folder's files)."""

    __slots__ = ("ids", "names")

    def __init__(self, names: tuple[str, ...], ids: npt.NDArray[Any]) -> None:
        self.names = names
        self.ids = ids

    def take(self, rows: slice | npt.NDArray[Any]) -> Suffixes:
        return Suffixes(self.names, self.ids[rows])

    def tail(self, i: int, key: str) -> str:
        return key + self.names[int(self.ids[i])]

    def tails(self, lo: int, hi: int, keys: list[str]) -> list[str]:
        return [key + self.names[n] for key, n in zip(keys, self.ids[lo:hi].tolist(), strict=True)]


Tails = Strings | Suffixes | None  # how an item's path goes on after the prefix (None: the key)


class SourceItems(Sequence[SourceItem]):
    """The sorted items of a scan; item i has position `first + i`, and its path is
    `prefix` + its tail (`tails` None: the key itself, as for a packed dataset's samples)."""

    def __init__(self, prefix: str, keys: Strings, tails: Tails,
                 labels: npt.NDArray[np.signedinteger[Any]], origin: Origin | None = None,
                 first: int = 0, fields: Strings | None = None) -> None:
        self.prefix = prefix
        self.keys = keys
        self.tails = tails
        self.labels = labels
        self.origin = origin
        self.first = first
        self.fields = fields  # each item's fields record; None: none

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> SourceItem: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SourceItem]: ...

    def __getitem__(self, index: int | slice) -> SourceItem | Sequence[SourceItem]:
        """An item; a slice is a SourceItems view (a list when it has a step)."""
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            rows = slice(start, max(start, stop))
            tails = self.tails.take(rows) if self.tails is not None else None
            fields = self.fields.take(rows) if self.fields is not None else None
            return SourceItems(self.prefix, self.keys.take(rows), tails, self.labels[rows],
                               self.origin, self.first + start, fields)
        i = range(len(self))[index]  # negative indices, IndexError
        key = self.keys.text(i)
        tail = self.tails.tail(i, key) if self.tails is not None else key
        return SourceItem(self.first + i, self.prefix + tail, key, int(self.labels[i]),
                          self.origin, self.fields.raw(i) if self.fields is not None else b"")

    def __iter__(self) -> Iterator[SourceItem]:
        origin, first, fields = self.origin, self.first, self.fields
        for j, (key, path, label) in enumerate(self.rows()):
            record = fields.raw(j) if fields is not None else b""
            yield SourceItem(first + j, path, key, label, origin, record)

    def rows(self) -> Iterator[tuple[str, str, int]]:
        """(key, path, label) of each item, without building SourceItem objects."""
        prefix = self.prefix
        for lo in range(0, len(self), CHUNK):
            hi = min(lo + CHUNK, len(self))
            keys = self.keys.texts(lo, hi)
            tails = self.tails.tails(lo, hi, keys) if self.tails is not None else keys
            for key, tail, label in zip(keys, tails, self.labels[lo:hi].tolist(), strict=True):
                yield key, prefix + tail, label

    def __repr__(self) -> str:
        return f"SourceItems({len(self)} items from position {self.first})"


class ItemsBuilder:
    """Rows appended in any order while a scan walks; `build` sorts them by key. A row's
    path is `prefix` + a tail: `add` stores the tail (a manifest's path), `add_file` only a
    suffix of the key (an image folder's file); one builder takes one kind of row."""

    def __init__(self, prefix: str, errors: str = "surrogatepass") -> None:
        self.prefix = prefix
        self.errors = errors
        self._keys = bytearray()
        self._key_stops = array("q")
        self._tails = bytearray()
        self._tail_stops = array("q")
        self._suffixes: dict[str, int] = {}
        self._suffix_ids = array("H")
        self._labels = array("q")
        self._fields = bytearray()  # each row's fields record, when the scan gives fields
        self._field_stops = array("q")
        # after build: each item's row in the order added (an archive lays out its offsets)
        self.order: npt.NDArray[np.intp] = np.zeros(0, np.intp)

    def __len__(self) -> int:
        return len(self._labels)

    def add(self, key: str, tail: str, label: int, fields: bytes = b"") -> None:
        """Add a row and its fields record (every row of a scan with fields has one); raises
        UnicodeEncodeError (and adds nothing) for an unencodable name."""
        tail_bytes = tail.encode("utf-8", self.errors)
        self._add_key(key, label, fields)
        self._tails += tail_bytes
        self._tail_stops.append(len(self._tails))

    def add_file(self, key: str, suffix: str, label: int, fields: bytes = b"") -> None:
        """Add a row whose tail is `key + suffix`; raises UnicodeEncodeError like `add`."""
        self._add_key(key, label, fields)
        self._suffix_ids.append(self._suffixes.setdefault(suffix, len(self._suffixes)))

    def _add_key(self, key: str, label: int, fields: bytes) -> None:
        self._keys += key.encode("utf-8", self.errors)  # first: raises before adding
        self._key_stops.append(len(self._keys))
        self._add_fields(fields)
        self._labels.append(label)

    def map_fields(self, change: Callable[[bytes], bytes] | None) -> None:
        """Replace every row's fields record by `change(record)`; None: drop them all."""
        records = _strings(self._fields, self._field_stops)
        self._fields = bytearray()
        self._field_stops = array("q")
        if change is not None:
            for row in range(len(records)):
                self._add_fields(change(records.raw(row)))

    def _add_fields(self, fields: bytes) -> None:
        if fields:
            self._fields += fields
            self._field_stops.append(len(self._fields))

    def build(self, rejects: list[Reject]) -> SourceItems:
        """Sort by (key, path); a row whose key an earlier row has becomes a reject."""
        if self._suffix_ids and self._tail_stops:
            raise ValueError("an ItemsBuilder takes add() or add_file() rows, not both")
        keys = _strings(self._keys, self._key_stops)
        self._keys = bytearray()  # copied into `bytes` above
        tails: Strings | Suffixes
        if self._suffix_ids:
            names = tuple(self._suffixes)
            ids = np.array(self._suffix_ids, np.uint8 if len(names) <= 1 << 8 else np.uint16)
            tails = Suffixes(names, ids)
            encoded = [name.encode(*UTF8) for name in names]
            order, repeats = sorted_order(keys, lambda row: encoded[int(ids[row])])
        else:
            tails = _strings(self._tails, self._tail_stops)
            self._tails = bytearray()
            order, repeats = sorted_order(keys, tails.raw)
        for row in order[repeats].tolist():
            key = keys.text(row)
            rejects.append(Reject(-1, self.prefix + tails.tail(row, key),
                                  f"duplicate key {key!r}: another file has that name"))
        order = self.order = order[~repeats]
        tails = tails.compacted(order) if isinstance(tails, Strings) else tails.take(order)
        labels = np.array(self._labels, dtype=np.int32)[order]  # class ids < MAX_CLASSES
        fields = None
        if self._field_stops:
            if len(self._field_stops) != len(self._labels):
                raise ValueError("every row of a scan with fields needs a fields record")
            fields = _strings(self._fields, self._field_stops).compacted(order)
        return SourceItems(self.prefix, keys.compacted(order), tails, labels, fields=fields)


def _strings(blob: bytearray, stops: array[int]) -> Strings:
    bounds = np.zeros(len(stops) + 1, np.int64)
    bounds[1:] = stops
    return Strings(bytes(blob), bounds[:-1], bounds[1:])


def sorted_order(keys: Strings, path_of: Callable[[int], bytes]
                 ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Rows in (key, path) order, as Python sorts the strings, and which rows repeat a key
    (`repeats`, indexed like the order).

    UTF-8 byte order is code point order. numpy sorts the first SORT_PREFIX bytes of
    every key; only rows whose prefixes tie are sorted in Python, by their whole key,
    then by `path_of(row)` (the path after the common prefix).
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
        run = sorted(order[lo : hi + 1].tolist(), key=lambda row: (keys.raw(row), path_of(row)))
        order[lo : hi + 1] = run
        for offset in range(1, len(run)):
            if keys.raw(run[offset]) == keys.raw(run[offset - 1]):
                repeats[lo + offset] = True
    return order, repeats
