"""A plain image folder as a Dataset, read file by file with the toolkit's decode path.

`pack bench photos/` uses it so a user can see the gain before converting: the only
difference from a packed dataset is where the bytes come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from packer.source.scan import scan
from packer.storage.files import read_input
from readers.decoding.decode import decode


class ImageFolderDataset(Dataset[tuple[Any, int]]):
    """`root/<class>/.../<image>` (or a manifest), decoded like PackedDataset."""

    def __init__(self, root: str | Path, size: tuple[int, int] | None = None) -> None:
        source = scan(root)
        self.paths = np.array([item.path for item in source.items])
        self.labels = np.array([item.label for item in source.items], dtype=np.int64)
        self.size = size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        data = read_input(str(self.paths[i]))
        return decode(data, "rgb8", self.size), int(self.labels[i])
