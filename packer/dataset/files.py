"""The files our readers need of a packed dataset, besides index.json.

    samples.npy, keys.npy    the per-sample table (fields.npy beside them with fields)
    the shards               index.json's list
    side files               the format's (npy: labels.npy and the field files)

What a copy read in place of the original holds (readers.ram.copies). Not the wids
index (stock wids' only) nor rejects.jsonl: a download (packer.dataset.remote), which
makes a dataset to keep, fetches those too, each file with its own checks.
"""

from __future__ import annotations

from packer import formats
from packer.core.index import Index
from packer.core.layout import FIELDS_NAME, KEYS_NAME, SAMPLES_NAME


def dataset_files(index: Index) -> list[str]:
    """The relative names of the files a reader of the dataset opens, but index.json."""
    names = [SAMPLES_NAME, KEYS_NAME, *((FIELDS_NAME,) if index.fields else ())]
    names += [shard.name for shard in index.shards]
    side_files = getattr(formats.load(index.format), "side_files", None)
    return names + (list(side_files(index)) if side_files is not None else [])
