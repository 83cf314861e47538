"""The wids shard index beside the shards, and what index.json's `extra` says about both.

    DST/photos.wids.json
      {"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "photos",
       "shardlist": [{"url": "photos-00000.tar", "nsamples": 256, "filesize": 1234560},
                     ...]}

wids (`wids.ShardListDataset(".../photos.wids.json")`) resolves each relative `url`
against the folder of the index file, so the index works wherever the dataset is copied
or served from. It is written by the writer's finish(), before the per-sample table and
index.json: index.json stays the mark of a complete dataset.

wids reads a member's name from the 100-byte name field of its tar header only: it
ignores the pax header that holds a longer or non-ASCII name, and its pattern for
`<key>.<ext>` does not match a newline. A dataset with such a key would be misread
(samples shifted, or a shard refused), so its wids index is not written and
`extra["wids_index_skipped"]` says which key, and why.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from packer.core.index import Index, SampleTable, ShardInfo
from packer.errors import CorruptDatasetError
from packer.formats._tar import NAME_BYTES
from packer.formats._wds_names import WIDS_SUFFIX, is_wids_index
from packer.storage.files import write_atomic

KIND = "wids-shard-index-v1"
LABEL_EXT = "cls"
CHUNK_KEYS = 1 << 12  # keys checked at a time: the work arrays stay small, whatever N


def index_extra(folder: Path, stem: str, shards: tuple[ShardInfo, ...], table: SampleTable,
                image_types: Iterable[str]) -> dict[str, Any]:
    """Write `<stem>.wids.json` when wids can read every sample; return index.json's extra.

    `image_types`: the member extensions of the images (jpg, png, ...): column-based
    readers (HF datasets, Ray Data) want one per dataset.
    """
    types = sorted(set(image_types))
    extra: dict[str, Any] = {"image_types": types, "wids_index": None}
    problem = "no samples" if not shards else unreadable_key(table, [*types, LABEL_EXT])
    if problem is not None:
        extra["wids_index_skipped"] = problem
        return extra
    name = stem + WIDS_SUFFIX
    text = json.dumps({"__kind__": KIND, "wids_version": 1, "name": stem,
                       "shardlist": _shardlist(shards)}, indent=1)
    write_atomic(folder / name, (text + "\n").encode("ascii"))
    extra["wids_index"] = name
    return extra


def _shardlist(shards: Iterable[ShardInfo]) -> list[dict[str, Any]]:
    return [{"url": shard.name, "nsamples": shard.num_samples, "filesize": shard.num_bytes}
            for shard in shards]


def indexed_name(index: Index) -> str | None:
    """The wids index a complete dataset has (None: index.json names none, as when it
    was skipped); a name that is not ours is refused."""
    name = index.extra.get("wids_index")
    if name is None:
        return None
    if not isinstance(name, str) or not is_wids_index(name):
        raise CorruptDatasetError(f"index.json: wids_index {name!r} is not a wids index name; "
                                  "reconvert the dataset")
    return name


def check_index(folder: Path, index: Index) -> bool:
    """Whether the dataset has a wids index (False: none to check), which must list
    exactly the shards of index.json; anything else names the file."""
    name = indexed_name(index)
    if name is None:
        return False
    path = folder / name
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise CorruptDatasetError(f"{path}: the wids index is missing; restore it or "
                                  "reconvert") from None
    except (OSError, ValueError) as exc:
        raise CorruptDatasetError(f"{path}: unreadable wids index ({exc}); restore it or "
                                  "reconvert") from exc
    if not isinstance(data, dict) or data.get("shardlist") != _shardlist(index.shards) \
            or data.get("wids_version") != 1:
        raise CorruptDatasetError(f"{path}: the wids index does not list the shards of "
                                  "index.json; restore it or reconvert")
    return True


def unreadable_key(table: SampleTable, exts: Iterable[str]) -> str | None:
    """Why wids would misread this dataset (naming the first such key), or None.

    A member name is `<encoded key>.<ext>` (`.` and `%` percent-encoded: 3 bytes each);
    it must be ASCII, without a newline, and fit NAME_BYTES with the longest extension.
    """
    room = NAME_BYTES - 1 - max(len(ext) for ext in exts)
    starts = np.asarray(table.rows["key_start"], dtype=np.int64)
    stops = np.append(starts[1:], len(table.keys_blob)).astype(np.int64)
    for low in range(0, len(starts), CHUNK_KEYS):
        bad = _bad_keys(table.keys_blob, starts[low : low + CHUNK_KEYS],
                        stops[low : low + CHUNK_KEYS], room)
        if len(bad):
            i = low + int(bad[0])
            key = table.key(i)
            return (f"key {key!r} (sample {i}) is not ASCII, holds a newline, or is over "
                    f"{room} bytes once encoded: wids reads only the tar header's "
                    f"{NAME_BYTES}-byte name field")
    return None


def _bad_keys(blob: np.ndarray, starts: np.ndarray, stops: np.ndarray,
              room: int) -> np.ndarray:
    """Positions (within this chunk) of the keys wids cannot read."""
    base = int(starts[0])
    chunk = np.asarray(blob[base : int(stops[-1])])
    encoded = (chunk == ord(".")) | (chunk == ord("%"))  # each grows by 2 bytes
    unsafe = (chunk >= 0x80) | (chunk == ord("\n"))
    grown = np.concatenate(([0], np.cumsum(encoded, dtype=np.int64)))
    flagged = np.concatenate(([0], np.cumsum(unsafe, dtype=np.int64)))
    first, last = starts - base, stops - base
    length = (last - first) + 2 * (grown[last] - grown[first])
    return np.flatnonzero((length > room) | (flagged[last] > flagged[first]))


def member_types(folder: Path, shards: Iterable[ShardInfo]) -> set[str]:
    """The image extensions in shards already written (a resumed run did not see them).

    A sample's image is its first member; its label and field members (`.txt`, `.npy`,
    ...) follow under the same key, which holds no dot (`encode_key`)."""
    types: set[str] = set()
    for shard in shards:
        path = folder / shard.name
        try:
            with tarfile.open(path, "r:") as tar:
                previous = None
                for member in tar:
                    key = member.name.partition(".")[0]
                    if key != previous:
                        types.add(member.name.rsplit(".", 1)[-1])
                        previous = key
        except (tarfile.TarError, OSError) as exc:
            raise CorruptDatasetError(f"{path}: not a valid tar ({exc}); rerun with "
                                      "--overwrite") from exc
    return types
