"""Where a WebDataset sample's label comes from (`pack convert --label`).

    (default)   `cls` when the first shard has `.cls` members, else `none`
    cls         the `.cls` member: an integer class id, or a class name
    json:KEY    KEY of the `.json` member (an integer or a string), as img2dataset
                metadata or a captioning set carries it
    none        no label: every sample is class 0 of the one class `unlabelled`

Integer labels keep their values (class names "0" .. "max"); named labels are numbered
in sorted name order, as a folder's classes are. A sample whose label cannot be read
is a reject naming its member and the option to change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from packer.core.fields import FieldValueError
from packer.errors import SourceError

MAX_CLASSES = 1_000_000  # one name per id: a stray big number would exhaust memory
UNLABELLED = "unlabelled"
MODES = ("cls", "json", "none")


@dataclass(frozen=True)
class LabelChoice:
    """A parsed --label: `mode` ("cls", "json", "none", or None for the default) and
    the JSON key."""

    mode: str | None = None
    key: str = ""

    @classmethod
    def parse(cls, text: str | None) -> LabelChoice:
        if text is None:
            return cls()
        mode, _, key = text.partition(":")
        if mode not in MODES or (mode == "json") != bool(key):
            raise ValueError(f"--label {text!r}: write cls, json:KEY or none")
        return cls(mode, key)


class Labels:
    """Each sample's label token, numbered as first seen; the classes at the end."""

    def __init__(self, choice: LabelChoice) -> None:
        self.choice = choice
        self.mode = choice.mode
        self.tokens: dict[str, int] = {}

    def settle(self, has_cls: bool) -> None:
        """Fix the default from the first shard: `cls` where it has `.cls` members."""
        if self.mode is None:
            self.mode = "cls" if has_cls else "none"

    def consumes(self, ext: str) -> bool:
        """Whether a member is a label, never a field (`cls` is a sample's own name)."""
        return ext == "cls"

    def needs(self, ext: str) -> bool:
        """Whether the scan must read a member for the label."""
        return ext == self.mode

    def token(self, members: Mapping[str, bytes]) -> int:
        """The provisional label of a sample from its small members."""
        if self.mode == "none":
            return self.tokens.setdefault(UNLABELLED, 0)
        text = self._text(members)
        return self.tokens.setdefault(text, len(self.tokens))

    def _text(self, members: Mapping[str, bytes]) -> str:
        if self.mode == "cls":
            raw = members.get("cls")
            if raw is None:
                raise FieldValueError("no .cls member for the label; pass --label none, or "
                                      "--label json:KEY")
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise FieldValueError(f"the .cls member is not text ({exc})") from exc
            if not text:
                raise FieldValueError("the .cls member is empty; pass --label none")
            return text
        raw = members.get("json")
        if raw is None:
            raise FieldValueError(f"no .json member for --label json:{self.choice.key}")
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise FieldValueError(f"the .json member is not JSON ({exc})") from exc
        found = value.get(self.choice.key) if isinstance(value, dict) else None
        if isinstance(found, bool) or not isinstance(found, int | str) or found == "":
            raise FieldValueError(f"the .json member has no integer or text "
                                  f"{self.choice.key!r}; pass another --label json:KEY")
        return str(found)

    def classes(self, where: str) -> tuple[tuple[str, ...], npt.NDArray[np.int32]]:
        """The class names and each provisional label's final label."""
        if self.mode == "none" or not self.tokens:
            return (UNLABELLED,), np.zeros(max(len(self.tokens), 1), np.int32)
        remap = np.zeros(len(self.tokens), np.int32)
        if all(token.isdecimal() and token.isascii() for token in self.tokens):
            top = max(int(token) for token in self.tokens)
            if top >= MAX_CLASSES:
                raise SourceError(f"{where}: label {top} is not a class id (labels are "
                                  f"0..C-1, C at most {MAX_CLASSES}); pass --label none")
            for token, provisional in self.tokens.items():
                remap[provisional] = int(token)
            return tuple(str(i) for i in range(top + 1)), remap
        names = sorted(self.tokens)
        for position, name in enumerate(names):
            remap[self.tokens[name]] = position
        return tuple(names), remap
