"""WebDataset shards at a URL, as SRC: `s3://bucket/train-{000000..000099}.tar`, or a URL
folder of shards (`s3://bucket/train/`), through fsspec (the `s3` extra).

The shards are downloaded once into a local cache folder named after the URL
(PACKER_SHARD_CACHE, default ~/.cache/packer-readers/shards), each under a temporary name
and renamed once its size is the remote size, and then read as a local folder of shards.
A shard already there at its remote size is not downloaded again, so `--resume` of an
interrupted conversion finds the same files (the job fingerprint covers their size and
mtime) and an interrupted download resumes at the next shard. The cache is the user's to
delete once the conversion is done.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from packer.dataset.urls import fetch, open_fs, remote_errors
from packer.errors import SourceError
from packer.source.kinds import expand_braces, has_braces, is_shard_name

CACHE_ENV = "PACKER_SHARD_CACHE"


def fetch_shards(url: str, storage_options: Mapping[str, Any] | None = None) -> Path:
    """The local folder holding the shards `url` names, downloaded where missing."""
    urls = _shard_urls(url, storage_options)
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "packer-readers" / "shards"
    folder = Path(root) / hashlib.sha256(url.encode()).hexdigest()[:16]
    names = [PurePosixPath(name).name for name in urls]
    if len(set(names)) != len(names):
        raise SourceError(f"{url}: two shards share a file name; pass one folder of shards")
    folder.mkdir(parents=True, exist_ok=True)
    for shard_url, name in zip(urls, names, strict=True):
        fs, remote = open_fs(shard_url, storage_options)
        with remote_errors(shard_url, "read the shard's size"):
            size = int(fs.size(remote))
        local = folder / name
        if local.is_file() and local.stat().st_size == size:
            continue
        fetch(fs, remote, local, shard_url, size)
    return folder


def _shard_urls(url: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    """A brace list's URLs, one shard's, or the shards of a URL folder (name order)."""
    if has_braces(url):
        return expand_braces(url)
    if is_shard_name(PurePosixPath(url).name):
        return [url]
    fs, root = open_fs(url, storage_options)
    with remote_errors(url, "list the shards"):
        listed = fs.ls(root, detail=False)
    base = url.rstrip("/")
    shards = sorted(f"{base}/{PurePosixPath(str(path)).name}" for path in listed
                    if is_shard_name(PurePosixPath(str(path)).name))
    if not shards:
        raise SourceError(f"{url}: no .tar/.tgz shards there; pass a brace list of shards "
                          "(s3://bucket/train-{000000..000099}.tar) or their folder")
    return shards
