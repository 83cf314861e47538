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
    """The relative names of the field files of the dataset at `url` in `staging` (none
    without fields): fields.npy, which `fetch_metadata` fetched with the table, and
    npy's `fields/` folder, downloaded here."""
    index = json.loads(raw_index)
    if not index.get("fields"):
        return []
    names = [FIELDS_NAME]
    if index.get("format") == "npy":
        fs, root = open_fs(url, options)
        with remote_errors(url, f"list {NPY_FIELDS_FOLDER}/"):
            found = sorted(f"{NPY_FIELDS_FOLDER}/{Path(str(path)).name}"
                           for path in fs.find(f"{root}/{NPY_FIELDS_FOLDER}"))
        (staging / NPY_FIELDS_FOLDER).mkdir(parents=True, exist_ok=True)
        for name in found:
            fetch(fs, f"{root}/{name}", staging / name, url)
        names += found
    return names
