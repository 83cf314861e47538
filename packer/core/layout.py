"""The names of the files every packed dataset folder holds, whatever its format.

One list, so that what counts as "ours" (to clear with --overwrite, keep with --resume,
upload, or recognise as a dataset folder) cannot drift between the modules that ask.
Each format declares its own data files (its module's `FILES`).
"""

INDEX_NAME = "index.json"  # written last: its presence means the conversion finished
SAMPLES_NAME = "samples.npy"  # per-sample label, location and digest
KEYS_NAME = "keys.npy"  # the keys, as one blob and offsets
FIELDS_NAME = "fields.npy"  # per-sample field locations and digests (datasets with fields)
REJECTS_NAME = "rejects.jsonl"  # every input that was skipped, with its reason
STATE_DIR = ".pack-state"  # the journal of an unfinished conversion (resume)
APPEND_DIR = ".pack-append"  # an unfinished append's staging (`pack append --resume`)
# The working state of a conversion or an append: ours, but never part of a dataset
# (a finished append's staging is renamed APPEND_DIR.done before it is deleted).
WORK_DIRS = (STATE_DIR, APPEND_DIR, APPEND_DIR + ".done")
SPLITS_DIR = "splits"  # train/val/test sample indices (`pack split`)
NEAR_NAME = "near-hashes.npy"  # each sample's dHash, kept by `pack dedup --near`

DATASET_FILES = (INDEX_NAME, SAMPLES_NAME, KEYS_NAME, REJECTS_NAME, FIELDS_NAME, SPLITS_DIR,
                 NEAR_NAME)
# The formats an index.json may name; the formats package maps each to its module.
FORMAT_NAMES = ("wds", "lmdb", "hdf5", "npy")

__all__ = ["APPEND_DIR", "DATASET_FILES", "FIELDS_NAME", "FORMAT_NAMES", "INDEX_NAME",
           "KEYS_NAME", "NEAR_NAME", "REJECTS_NAME", "SAMPLES_NAME", "SPLITS_DIR", "STATE_DIR",
           "WORK_DIRS"]
