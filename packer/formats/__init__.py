"""Format name -> module, imported lazily, with an install hint when a library is missing."""

from __future__ import annotations

import importlib
from typing import cast

from packer.errors import MissingDependencyError
from packer.formats.base import FormatModule

FORMATS = {"wds": "_wds", "lmdb": "_lmdb", "hdf5": "_hdf5", "npy": "_npy"}
REQUIRES = {"lmdb": "lmdb", "hdf5": "h5py", "wds": "webdataset", "npy": "numpy"}


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
