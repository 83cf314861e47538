"""Offline side of the toolkit: turn a folder of small images into one packed dataset.

    from packer import convert, ConvertOptions, EncodeOptions, ShardOptions, verify
    from packer.errors import SourceError   # every error class lives there, each a PackError

`packer` never imports torch at import time, so converting works on machines without it
(npy's resize loads it when an npy conversion starts). Names load lazily (PEP 562), so
`import packer.errors` in a DataLoader worker costs the error classes, not the conversion
stack, Pillow and libjpeg-turbo.

Layers, each importing only those below it (pyproject's import-linter contracts):

    packer.conversion            options, the writer loop, journal, destinations, executors
    packer.source | encode       what a conversion reads | how a sample is stored
    packer.dataset               operations on a complete dataset: verify, describe, fetch
    packer.formats | imaging     one module per byte layout | codecs
    packer.core                  the on-disk contract: records, index.json, the sample table
    packer.storage | errors      bytes on disks | every error class
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from packer.errors import PackError

if TYPE_CHECKING:
    from packer.api import append, convert, describe, verify
    from packer.conversion.append import AppendResult
    from packer.conversion.job import ConvertOptions
    from packer.core.fields import FieldSpec
    from packer.core.index import Index
    from packer.dataset.describe import Description
    from packer.dataset.splits import SplitReport, split
    from packer.dataset.stats import DatasetStats, stats
    from packer.dataset.verify import Report
    from packer.encode import EncodeOptions
    from packer.formats.base import ShardOptions
    from packer.source.fields import FieldChoice

_LAZY = {
    "ConvertOptions": "packer.conversion.job",
    "convert": "packer.api",
    "append": "packer.api",
    "AppendResult": "packer.conversion.append",
    "EncodeOptions": "packer.encode",
    "FieldChoice": "packer.source.fields",
    "FieldSpec": "packer.core.fields",
    "ShardOptions": "packer.formats.base",
    "Index": "packer.core.index",
    "verify": "packer.api",
    "Report": "packer.dataset.verify",
    "describe": "packer.api",
    "Description": "packer.dataset.describe",
    "DatasetStats": "packer.dataset.stats",
    "stats": "packer.dataset.stats",
    "SplitReport": "packer.dataset.splits",
    "split": "packer.dataset.splits",
}

__all__ = [
    "AppendResult",
    "ConvertOptions",
    "DatasetStats",
    "Description",
    "EncodeOptions",
    "FieldChoice",
    "FieldSpec",
    "Index",
    "PackError",
    "Report",
    "ShardOptions",
    "SplitReport",
    "append",
    "convert",
    "describe",
    "split",
    "stats",
    "verify",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562) and keep it."""
    if name not in _LAZY:
        raise AttributeError(f"module 'packer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
