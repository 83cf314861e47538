"""Format name -> module, imported lazily, with an install hint when a library is missing."""

from __future__ import annotations

import importlib
from typing import cast

from packer.errors import MissingDependencyError
from packer.formats.base import FormatModule

FORMATS = {"wds": "_wds", "lmdb": "_lmdb", "hdf5": "_hdf5", "npy": "_npy"}
REQUIRES = {"lmdb": "lmdb", "hdf5": "h5py", "wds": "webdataset", "npy": "numpy"}
# Each format's files at the top of a dataset folder (wds' shards as a pattern), kept
# here as well as in each module's FILES: telling which files in a DST are ours
# (before a conversion, to clear or keep them) must not import every format's library,
# which a conversion to another format may not have. tests/packing/test_formats_files.py
# checks that each module's FILES is this.
FILES: dict[str, tuple[str, ...]] = {
    "wds": ("*-[0-9][0-9][0-9][0-9][0-9]*.tar",), "lmdb": ("data.lmdb",),
    "hdf5": ("data.h5", "data.parts"), "npy": ("images.npy", "labels.npy", "fields")}


def load(name: str) -> FormatModule:
    """Import the module that owns format `name`."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; choose one of {', '.join(FORMATS)}")
    try:
        module = importlib.import_module(f"packer.formats.{FORMATS[name]}")
    except ImportError as exc:
        raise MissingDependencyError(
            f"format {name} needs the {REQUIRES[name]} package ({exc}); "
            f"run `pip install {REQUIRES[name]}`"
        ) from exc
    return cast(FormatModule, module)
