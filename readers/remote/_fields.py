"""The field files a URL's mirror needs besides index.json and the sample table.

A dataset with fields has `fields.npy` (per-sample field locations and digests, checked
with the table when the dataset opens), which `fetch_metadata` fetches with the table.
npy keeps the values themselves in files beside images.npy (its format's `side_files`),
memory-mapped like the table, so the mirror takes them with the metadata. wds, lmdb and
hdf5 keep the values inside their shards, which the mirror fetches on demand as it does
for the images.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packer import formats
from packer.core.index import index_from_json
from packer.core.layout import FIELDS_NAME, INDEX_NAME
from packer.dataset.urls import fetch, open_fs

__all__ = ["fetch_field_files"]


def fetch_field_files(url: str, options: Mapping[str, Any], raw_index: bytes,
                      staging: Path) -> list[str]:
    """The relative names of the field files of the dataset at `url` now in `staging`
    (none without fields): fields.npy, and the format's side files, downloaded here."""
    index = index_from_json(json.loads(raw_index), Path(url) / INDEX_NAME)
    if not index.fields:
        return []
    names = list(formats.load(index.format).side_files(index))
    if names:
        fs, root = open_fs(url, options)
        for name in names:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            fetch(fs, f"{root}/{name}", staging / name, url)
    return [FIELDS_NAME, *names]
