"""The field files a URL's mirror needs besides index.json and the sample table.

A dataset with fields has `fields.npy` (per-sample field locations and digests, checked
with the table when the dataset opens); npy keeps the values themselves in a `fields/`
folder beside images.npy, memory-mapped like the table, so the mirror takes them with
the metadata. wds, lmdb and hdf5 keep the values inside their shards, which the mirror
fetches on demand as it does for the images.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packer.core.layout import FIELDS_NAME
from packer.dataset.remote import fetch, open_fs, remote_errors

NPY_FIELDS_FOLDER = "fields"  # packer.formats._npy_fields.FOLDER

__all__ = ["fetch_field_files"]


def fetch_field_files(url: str, options: Mapping[str, Any], raw_index: bytes,
                      staging: Path) -> list[str]:
    """Download the field files of the dataset at `url` into `staging`; their relative
    names (none for a dataset without fields)."""
    index = json.loads(raw_index)
    if not index.get("fields"):
        return []
    fs, root = open_fs(url, options)
    names = [FIELDS_NAME]
    if index.get("format") == "npy":
        with remote_errors(url, f"list {NPY_FIELDS_FOLDER}/"):
            found = fs.find(f"{root}/{NPY_FIELDS_FOLDER}")
        names += sorted(f"{NPY_FIELDS_FOLDER}/{Path(str(path)).name}" for path in found)
    for name in names:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        fetch(fs, f"{root}/{name}", staging / name, url)
    return names
