"""The files a complete copy of a packed dataset holds, besides index.json.

    samples.npy, keys.npy    the per-sample table (fields.npy beside them with fields)
    the shards               index.json's list
    side files               the format's (npy: labels.npy and the field files)
    the wids index           wds, when the dataset has one

What a copy that is read in place of the original needs (readers.in_memory); a
download (packer.dataset.remote) fetches the same, each with its own checks.
"""

from __future__ import annotations

from packer import formats
from packer.core.index import Index
from packer.core.layout import FIELDS_NAME, KEYS_NAME, SAMPLES_NAME


def dataset_files(index: Index) -> list[str]:
    """The relative names of every file of the dataset but index.json and rejects.jsonl."""
    from packer.formats._wids import indexed_name  # wds only: not for every reader

    names = [SAMPLES_NAME, KEYS_NAME, *((FIELDS_NAME,) if index.fields else ())]
    names += [shard.name for shard in index.shards]
    side_files = getattr(formats.load(index.format), "side_files", None)
    names += list(side_files(index)) if side_files is not None else []
    wids = indexed_name(index) if index.format == "wds" else None
    return names + ([wids] if wids is not None else [])
