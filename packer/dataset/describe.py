"""The facts `pack info` shows, as a plain dict (also its --json output)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from packer.core.index import open_dataset


def describe(folder: Path) -> dict[str, Any]:
    """Format, counts per class, shards, sizes, options and rejects of a dataset."""
    index, table = open_dataset(folder)
    counts = np.bincount(np.asarray(table.labels), minlength=len(index.class_names))
    return {
        "path": str(folder),
        "format": index.format,
        "format_version": index.format_version,
        "num_samples": index.num_samples,
        "num_classes": len(index.class_names),
        "num_shards": len(index.shards),
        "num_bytes": sum(shard.num_bytes for shard in index.shards),
        "image_size": list(index.image_size) if index.image_size else None,
        "encode": index.encode,
        "num_rejected": index.num_rejected,
        "num_ignored": index.num_ignored,
        "classes": {name: int(counts[i]) for i, name in enumerate(index.class_names)},
        "shards": [asdict(shard) for shard in index.shards],
    }
