"""The small frozen values that flow from the scan through encoding to the writers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One input image found by the scan.

    `position` is the item's place in the sorted scan (rejected items included), which
    is what resume counts in.
    """

    position: int
    path: str
    key: str
    label: int


@dataclass(frozen=True, slots=True)
class Record:
    """One encoded sample, ready for a writer.

    `data` is the stored bytes: the original file (pass-through), a re-encoded image,
    or raw RGB pixels for npy. `digest` is the xxh3-128 of `data`.
    """

    position: int
    key: str
    label: int
    data: bytes
    ext: str
    digest: bytes


@dataclass(frozen=True, slots=True)
class Reject:
    """An input that was not packed, and why: it goes to rejects.jsonl."""

    position: int
    path: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "reason": self.reason}
