"""The small frozen values that flow from the scan through encoding to the writers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Origin(Protocol):
    """Where the bytes of items that are not files come from: a packed dataset, an archive.

    `read` returns the stored bytes of the sample `item.position` (raw RGB at
    `pixel_size` when the dataset stores pixels, else an encoded image) and raises
    `RejectReason` when that sample is damaged. Objects travel to worker processes by
    pickle, so they open their file handles lazily where they read.
    """

    @property
    def pixel_size(self) -> tuple[int, int] | None: ...

    @property
    def whole_files(self) -> bool:
        """True: `read` returns the bytes of the file `path` names (an archive member),
        encoded as that file would be; False: a packed sample (`pixel_size` applies)."""
        ...

    def read(self, item: SourceItem) -> bytes: ...


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One input image found by the scan.

    `position` is the item's place in the sorted scan (rejected items included), which
    is what resume counts in. `origin` is None for a file at `path`; for a sample of a
    packed dataset it reads the bytes, and `path` (the dataset folder joined with the
    key) only names the sample.
    """

    position: int
    path: str
    key: str
    label: int
    origin: Origin | None = None
    fields: bytes = b""  # the fields record (`pack_record`); b"": no fields


@dataclass(frozen=True, slots=True)
class Record:
    """One encoded sample, ready for a writer.

    `data` is the stored bytes: the original file (pass-through), a re-encoded image,
    or raw RGB pixels for npy. `digest` is the xxh3-128 of `data`. `fields` is the
    sample's fields record (`pack_record`), b"" when the dataset has no fields.
    """

    position: int
    key: str
    label: int
    data: bytes
    ext: str
    digest: bytes
    fields: bytes = b""


@dataclass(frozen=True, slots=True)
class Reject:
    """An input that was not packed, and why: it goes to rejects.jsonl."""

    position: int
    path: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "reason": self.reason}
