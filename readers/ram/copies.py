"""`in_memory=True`: the dataset's files copied once per node into a tmpfs, read from there.

The naive way to keep a small dataset in RAM, a Dataset that loads every sample into a
list, holds one copy per DataLoader worker (spawn pickles it to each; fork copies
the pages that reference counting touches) and one per DDP rank. Here the first process
on the node copies the files a reader needs (index.json last, the tables, every shard)
into `$PACKER_RAM_DIR/packer-ram-<uid>-<identity>/` (default /dev/shm), and the ordinary
format readers open that copy: npy, lmdb and hdf5 map it, so every process on the node
reads the same pages of RAM; wds reads its tars with `pread` from the same pages. One
copy per node, whatever the workers, ranks and start methods.

The copy is named after the dataset's version (a folder and the file identity of its
index.json, so a dataset reconverted in place gets a new copy; a URL and the content of
its index.json); a URL is downloaded straight into RAM, never into
the disk cache. Before copying, the size is checked against the memory this process may
take (the host, the cgroup limit, the tmpfs: `check_fits`). Locking, sharing and removal
when the last user ends, a SIGKILL included, are the tmpfs folder's (`attach`, `detach`).
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packer import formats
from packer.core.index import INDEX_NAME, Index, parse_index, read_index
from packer.core.layout import FIELDS_NAME, KEYS_NAME, SAMPLES_NAME
from packer.dataset.open import is_url, local_version, url_version_name
from packer.dataset.urls import download_dataset, open_fs, remote_errors
from packer.errors import CorruptDatasetError
from readers.options import RemoteOptions
from readers.ram import _tmpfs
from readers.ram.memory_limit import check_fits

__all__ = ["InMemory", "in_memory_copy", "remove_unused"]

Build = Callable[[Path], None]


class InMemory:
    """This process's use of a dataset's copy in RAM (a tmpfs folder).

    Pickles as its source, so a spawned worker or another rank attaches to the same copy
    (or, on another node, makes that node's). Dropped or closed, it lets go of the copy.
    """

    def __init__(self, source: str, storage_options: Mapping[str, Any] | None = None,
                 name: str | None = None) -> None:
        """`name`: the copy's, when known (a copy sent to a worker): no look at the
        source unless the copy is missing here."""
        self.source = source
        self.storage_options = dict(storage_options or {})
        plan = _url_plan if is_url(source) else _folder_plan
        planned = plan(source, self.storage_options) if name is None else None
        self.name = name = planned[0] if planned is not None else str(name)
        paths = _tmpfs.Paths(_tmpfs.ram_root(), name)
        self.folder = paths.folder

        def build(folder: Path) -> None:
            now, need, copy = planned or plan(source, self.storage_options)
            if now != name:
                raise RuntimeError(f"{source} changed since it was opened with "
                                   "in_memory=True (reconverted?): open it again")
            check_fits(need, source, folder.parent)
            copy(folder)

        users = _tmpfs.attach(paths, build)
        self._finalizer = weakref.finalize(self, _tmpfs.detach, users)

    def close(self) -> None:
        """Stop using the copy (it is removed once no process on the node uses it)."""
        self._finalizer()

    def __reduce__(self) -> tuple[Any, ...]:
        return InMemory, (self.source, self.storage_options, self.name)


def in_memory_copy(path: str | Path, remote: RemoteOptions | None) -> InMemory:
    """The dataset's copy in RAM; refuses the disk cache's options, which do not apply."""
    if remote is not None and (remote.cache_dir is not None or
                               remote.max_cache_bytes is not None):
        raise ValueError(f"{path}: cache_dir and the disk cache size do not apply with "
                         "in_memory=True, which downloads the dataset into RAM: drop them")
    if not is_url(str(path)) and remote is not None:
        raise ValueError(f"{path}: remote options apply to a URL (s3://..., file://...), "
                         "not to a local folder")
    storage_options = None if remote is None else dict(remote.storage_options)
    return InMemory(str(path) if is_url(str(path)) else str(Path(path).resolve()),
                    storage_options)


def remove_unused() -> list[str]:
    """Remove this user's in-RAM copies that no process uses (their watcher was killed)."""
    root = _tmpfs.ram_root()
    return _tmpfs.sweep(root) if root.is_dir() else []


def _folder_plan(source: str, _: Mapping[str, Any]) -> tuple[str, int, Build]:
    """A local folder: copy the tables, the shards and the format's other files (field
    files among them), index.json last."""
    folder = Path(source).resolve()
    index = read_index(folder)  # refuses a folder without index.json
    version = local_version(folder)
    files = dataset_files(index)  # a missing library fails before the copy
    need = sum(_size(folder / name) for name in files) + _size(folder / INDEX_NAME)

    def build(target: Path) -> None:
        for name in [*files, INDEX_NAME]:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / name, target / name)

    return version.name(), need, build


def dataset_files(index: Index) -> list[str]:
    """The relative names of the files a reader of the dataset opens, but index.json: the
    per-sample table, the shards and the format's side files (`side_files`). Not the files
    kept for other tools (the wids index) nor rejects.jsonl, which a copy read in place of
    the original does not need."""
    return [SAMPLES_NAME, KEYS_NAME, *((FIELDS_NAME,) if index.fields else ()),
            *(shard.name for shard in index.shards), *formats.load(index.format).side_files(index)]


def _size(path: Path) -> int:
    """A file's size; a file of the dataset that is gone is named, as a reader on disk
    names it, not a bare FileNotFoundError."""
    try:
        return path.stat().st_size
    except FileNotFoundError as exc:
        raise CorruptDatasetError(f"{path}: missing from the dataset; restore it or "
                                  "reconvert the dataset") from exc


def _url_plan(url: str, options: Mapping[str, Any]) -> tuple[str, int, Build]:
    """A URL: read index.json now; the build downloads everything (`download_dataset`:
    sizes and sha256 checked, index.json last)."""
    fs, root = open_fs(url, options)
    with remote_errors(url, "read index.json"):
        raw: bytes = fs.cat_file(f"{root}/{INDEX_NAME}")
    index = parse_index(raw, Path(url) / INDEX_NAME)
    shards = {shard.name for shard in index.shards}
    with remote_errors(url, "read the size of the tables"):
        tables = sum(int(fs.size(f"{root}/{name}")) for name in dataset_files(index)
                     if name not in shards)
    need = tables + len(raw) + sum(shard.num_bytes for shard in index.shards)

    def build(target: Path) -> None:
        download_dataset(url, options, target)

    return url_version_name(url, raw), need, build
