"""The files our readers need of a packed dataset, besides index.json.

    samples.npy, keys.npy    the per-sample table (fields.npy beside them with fields)
    the shards               index.json's list
    side files               the format's (npy: labels.npy and the field files)

What a copy read in place of the original holds (the readers' in-RAM copies). Not the
files kept for other tools (the wids index: `kept_files`) nor rejects.jsonl: a download
(`download_dataset`), which makes a dataset to keep, fetches those too, each file with
its own checks. Each format says its own (`side_files`, `kept_files` of `FormatModule`).
"""

from __future__ import annotations

from packer import formats
from packer.core.index import Index
from packer.core.layout import FIELDS_NAME, KEYS_NAME, SAMPLES_NAME


def dataset_files(index: Index) -> list[str]:
    """The relative names of the files a reader of the dataset opens, but index.json."""
    return [SAMPLES_NAME, KEYS_NAME, *((FIELDS_NAME,) if index.fields else ()),
            *(shard.name for shard in index.shards), *formats.load(index.format).side_files(index)]

