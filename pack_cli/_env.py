"""`pack info --env`: the versions and the decode paths in use, for a bug report."""

from __future__ import annotations

import platform
from importlib import metadata

from packer.errors import DISTRIBUTION
from packer.imaging.crop_extension import status

LIBRARIES = ("torch", "numpy", "pillow", "simplejpeg", "webdataset", "lmdb", "h5py")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    """What the bug report needs: this package, Python, the libraries, the crop decode."""
    facts = {DISTRIBUTION: _version(DISTRIBUTION), "python": platform.python_version(),
             "platform": platform.platform()}
    facts.update({name: _version(name) for name in LIBRARIES})
    facts["cropped JPEG decode"] = status()
    return facts
