"""The mirror of a URL dataset on this machine: its folder, index.json and tables."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packer.core.index import INDEX_NAME, KEYS_NAME, SAMPLES_NAME
from packer.dataset.open import url_version_name
from packer.dataset.urls import fetch_metadata
from readers.options import check_budget
from readers.remote._fields import fetch_field_files
from readers.remote._locks import LOCKS

DEFAULT_DISK_CACHE_BYTES = 8 * 2**30


def default_cache_dir() -> Path:
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"packer-cache-{user}"


@dataclass(frozen=True)
class RemoteSource:
    """Where a remote dataset lives and where this machine mirrors it (picklable)."""

    url: str
    folder: Path
    cache_bytes: int = DEFAULT_DISK_CACHE_BYTES
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    prefetch_shards: int = 2  # fetched ahead of the reader, each by its own thread; 0: off


def open_remote(url: str, storage_options: Mapping[str, Any] | None = None,
                cache_dir: str | Path | None = None,
                cache_bytes: int | None = None, prefetch_shards: int = 2) -> RemoteSource:
    """Mirror index.json and the per-sample table of `url` into the cache; no shard yet.

    The mirror folder is named after the URL and the index's content, so a dataset
    reconverted at the same URL gets a fresh mirror. index.json is written last.
    """
    budget = check_budget("RemoteOptions.max_cache_bytes",
                          DEFAULT_DISK_CACHE_BYTES if cache_bytes is None else cache_bytes,
                          "pinned shards only")
    options = dict(storage_options or {})
    staging = Path(cache_dir if cache_dir is not None else default_cache_dir()) / \
        f".incoming-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        raw = fetch_metadata(url, options, staging)
        extra = fetch_field_files(url, options, raw, staging)  # fields.npy, side files
        folder = staging.parent / url_version_name(url, raw)
        if not (folder / INDEX_NAME).is_file():
            (folder / LOCKS).mkdir(parents=True, exist_ok=True)
            for table in (SAMPLES_NAME, KEYS_NAME, *extra):
                (folder / table).parent.mkdir(exist_ok=True)
                os.replace(staging / table, folder / table)
            (staging / INDEX_NAME).write_bytes(raw)
            os.replace(staging / INDEX_NAME, folder / INDEX_NAME)  # last: the mirror is usable
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RemoteSource(url.rstrip("/"), folder, budget, options, prefetch_shards)
