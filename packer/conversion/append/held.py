"""What an append knows of DST's samples (Held) and how it reads a packed or archive SRC
(Renumbered): the pieces of the plan that look at one input at a time."""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Literal

import numpy as np

from packer.conversion.append.fields import Reorder
from packer.core.checks import digest_of
from packer.core.index import SampleTable
from packer.core.record import Origin, SourceItem
from packer.storage.files import read_input

Existing = Literal["size", "digest"]


class Renumbered:
    """A packed or archive source's reader for the items of one staging, numbered 0..n-1
    (what its writer loop and journal count in), which it reads by their positions in the
    scan; their fields come in DST's order (`reorder`)."""

    def __init__(self, origin: Origin, positions: list[int], reorder: Reorder) -> None:
        self.origin = origin
        self.positions = positions
        self.reorder = reorder

    @property
    def pixel_size(self) -> tuple[int, int] | None:
        return self.origin.pixel_size

    @property
    def whole_files(self) -> bool:
        return self.origin.whole_files

    def read(self, item: SourceItem) -> bytes:
        return self.origin.read(self._scanned(item))

    def read_fields(self, item: SourceItem) -> bytes:
        read = getattr(self.origin, "read_fields", None)
        return self.reorder(b"" if read is None else bytes(read(self._scanned(item))))

    def _scanned(self, item: SourceItem) -> SourceItem:
        return dataclasses.replace(item, position=self.positions[item.position])


class Held:
    """DST's keys, labels, sizes and digests as plain values, for one look-up an input."""

    def __init__(self, table: SampleTable, existing: Existing | None) -> None:
        blob = bytes(table.keys_blob)
        starts = [*np.asarray(table.rows["key_start"]).tolist(), len(blob)]
        text = blob.decode("utf-8")
        if len(text) != len(blob):  # a non-ASCII key: byte offsets are not str offsets
            self.positions = {blob[a:b].decode("utf-8"): i
                              for i, (a, b) in enumerate(itertools.pairwise(starts))}
        else:  # the common case, sliced at C speed
            self.positions = dict(zip(map(text.__getitem__, map(slice, starts, starts[1:])),
                                      range(len(starts) - 1), strict=True))
        self.labels = np.asarray(table.labels).tolist()
        self.sizes = np.asarray(table.sizes).tolist()
        self.table = table
        self.existing = existing  # None: the stored bytes are not the file's

    def conflict(self, item: SourceItem, label: int, fields: bytes, i: int) -> str | None:
        """Why an input whose key DST holds (sample i) is not that sample, or None.

        `label` is its label in DST's label map, `fields` its field record in DST's
        order (b"" where the fields come from a packed SRC, which are not compared here)."""
        if self.labels[i] != label:
            return f"with another class (sample {i})"
        if fields and self.table.fields is not None and \
                digest_of(fields) != self.table.fields.digest(i):
            return f"with other field values (sample {i})"
        if self.existing is None:
            return None  # re-encoded samples: only a re-encode could compare the bytes
        try:
            size = os.stat(item.path).st_size
            if size != self.sizes[i]:
                return f"with other bytes ({size} bytes, sample {i} has {self.sizes[i]})"
            if self.existing == "digest" and \
                    digest_of(read_input(item.path)) != self.table.digest(i):
                return f"with other bytes (sample {i})"
        except OSError:  # unreadable now: the sample DST holds stays
            return None
        return None
