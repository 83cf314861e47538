"""A DST behind an fsspec URL (`s3://bucket/prefix`, `file:///path`): stage, upload, index last.

    pack convert photos/ s3://bucket/photos.wds --to wds [--storage-option KEY=VALUE ...]
                                                         [--staging DIR]

The ordinary local conversion runs into a staging folder (a temporary one, or
`--staging DIR`), and its files go up as they are finished:

    each finished shard       when the writer ends its part (wds: every shard), on background
                              threads, while encoding goes on
    at the end                the remaining data files (lmdb, hdf5 and npy are one file
                              each), samples.npy, keys.npy, rejects.jsonl, then index.json

so whoever reads the URL sees no index.json or a complete dataset. An object store PUT is
atomic; into a file:// URL each file is copied to a temporary name, fsynced and renamed.
A temporary staging folder drops each shard once uploaded, so the local disk holds about
one shard at a time (lmdb, hdf5 and npy stage their whole file).

Resume: on a URL that holds a complete dataset, `--resume` checks that it is the same job
(by the job record in its index.json) and does nothing. Otherwise `--staging DIR` is an
ordinary resumable conversion, so `--resume --staging DIR` continues it and uploads what
the URL lacks (same name and size: not sent again). Without `--staging` nothing of an
interrupted run survives locally: `--resume` is refused and `--overwrite` starts over.

Endpoint, credentials and `storage_options`: as for every URL (`open_fs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from packer.conversion.destination import is_ours
from packer.conversion.identity import check_same_job
from packer.conversion.job import ConvertOptions, convert_local, plan_job
from packer.conversion.journal import STATE_DIR, ResumeRefused
from packer.core.index import (
    FIELDS_NAME,
    INDEX_NAME,
    KEYS_NAME,
    REJECTS_NAME,
    SAMPLES_NAME,
    Index,
    ShardInfo,
    parse_index,
    read_index,
)
from packer.dataset.urls import is_local, open_fs, remote_errors
from packer.encode import EncodeOptions
from packer.errors import DatasetExistsError
from packer.formats._wds_names import name_of
from packer.storage.files import PARTIAL_SUFFIX, commit, fsync_file, partial_path

UPLOAD_THREADS = 4
# Sent after every data file, before index.json.
TABLES = (SAMPLES_NAME, KEYS_NAME, FIELDS_NAME, REJECTS_NAME)


def ours(name: str) -> bool:
    """Whether a name below the prefix is one a conversion uploads (no resume state)."""
    return is_ours(name, with_state=False)


class Destination:
    """A dataset location behind a URL: what it holds, clearing it, uploading into it."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = open_fs(url, storage_options)
        self.local = is_local(self.fs)

    def sizes(self) -> dict[str, int]:
        """Name (relative to the prefix) -> size of every file below it."""
        with remote_errors(self.url, "list the destination"):
            self.fs.invalidate_cache(self.root)
            try:
                found = self.fs.find(self.root, detail=True)
            except FileNotFoundError:
                return {}
        start = len(self.root) + 1
        return {str(path)[start:]: int(info.get("size") or 0) for path, info in found.items()
                if str(path).startswith(self.root + "/")}

    def prepare(self, resume: bool, overwrite: bool) -> None:
        """Refuse to clobber a dataset or somebody else's files, as a local DST does."""
        names = sorted(self.sizes())
        if overwrite:
            self.clear(names)
        elif INDEX_NAME in names:
            raise DatasetExistsError(
                f"{self.url}: already holds a complete dataset; pass --overwrite to replace it")
        elif any(ours(name) for name in names) and not resume:
            raise DatasetExistsError(
                f"{self.url}: holds an unfinished upload; pass --overwrite to start over, or "
                "--resume --staging DIR with the staging folder of the interrupted run")
        foreign = [name for name in names if not ours(name)]
        if foreign:
            raise DatasetExistsError(
                f"{self.url}: not empty (found {foreign[0]!r}); choose an empty or new prefix")

    def read_index(self) -> Index | None:
        """The index.json below the prefix, or None when there is none (not complete)."""
        with remote_errors(self.url, "read index.json"):
            try:
                raw: bytes = self.fs.cat_file(f"{self.root}/{INDEX_NAME}")
            except FileNotFoundError:
                return None
        return parse_index(raw, Path(self.url) / INDEX_NAME)

    def clear(self, names: list[str]) -> None:
        """Remove what an earlier conversion uploaded, index.json first."""
        mine = [f"{self.root}/{name}" for name in names if ours(name) and name != INDEX_NAME]
        with remote_errors(self.url, "remove the earlier dataset"):
            if INDEX_NAME in names:
                self.fs.rm_file(f"{self.root}/{INDEX_NAME}")
            if mine:
                self.fs.rm(mine)

    def put(self, local: Path, name: str) -> None:
        """Upload one file; it appears under its name only once complete."""
        target = f"{self.root}/{name}"
        with remote_errors(self.url, f"upload {name}"):
            if self.local:  # a plain folder: temporary name, fsync, rename
                final = Path(target)
                final.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(local, partial_path(final))
                fsync_file(partial_path(final))
                commit(partial_path(final), final)
            else:
                self.fs.put_file(str(local), target)


class Uploader:
    """Uploads a staging folder: shards as they are finished, everything else, index.json last.

    `log` (a list) receives each name as its upload completes, in order (a file the
    destination already holds, same name and size, is not sent again on resume).
    """

    def __init__(self, dest: Destination, folder: Path, drop_uploaded: bool,
                 present: Mapping[str, int] | None = None, log: list[str] | None = None) -> None:
        self.dest = dest
        self.folder = folder
        self.drop_uploaded = drop_uploaded
        self.present = dict(present or {})
        self.log = log
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="pack-upload")
        self._sent: dict[str, Future[None]] = {}

    def shards_done(self, shards: Iterable[ShardInfo]) -> None:
        """The writer ended a part: send its finished shards (a hook of convert_local())."""
        self._raise_failed()
        for shard in shards:
            if shard.name not in self._sent and (self.folder / shard.name).is_file():
                self._sent[shard.name] = self._pool.submit(self._upload, shard.name)

    def _upload(self, name: str) -> None:
        path = self.folder / name
        if self.present.get(name) != path.stat().st_size:  # resume: the same file is there
            self.dest.put(path, name)
            with self._lock:
                if self.log is not None:
                    self.log.append(name)
        if self.drop_uploaded and name not in TABLES and name != INDEX_NAME:
            path.unlink()

    def _raise_failed(self) -> None:
        for future in self._sent.values():
            if future.done() and future.exception() is not None:
                future.result()

    def commit(self, index: Index) -> None:
        """Send every remaining file, wait for all, then index.json: the dataset is complete."""
        self.shards_done(index.shards)
        for future in list(self._sent.values()):
            future.result()
        rest = [path.relative_to(self.folder).as_posix()
                for path in sorted(self.folder.rglob("*")) if path.is_file()]
        rest = [name for name in rest if name not in self._sent and name != INDEX_NAME
                and not name.endswith(PARTIAL_SUFFIX) and not name.startswith(STATE_DIR)]
        data = [name for name in rest if name not in TABLES]  # lmdb, hdf5, npy, wids index
        for batch in (data, [name for name in TABLES if name in rest]):  # data, then tables:
            for future in [self._pool.submit(self._upload, name) for name in batch]:
                future.result()  # each batch waits, so the order on the URL is the order here
        self._upload(INDEX_NAME)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def staging_folder(staging: str | Path | None) -> Iterator[tuple[Path, bool]]:
    """(folder, owned): the given folder, or a temporary one removed afterwards."""
    if staging is not None:
        yield Path(staging), False
        return
    folder = Path(tempfile.mkdtemp(prefix="pack-staging-"))
    try:
        yield folder / "dataset", True
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def convert_remote(src: str | Path, url: str, fmt: str, options: EncodeOptions | None = None,
                   run: ConvertOptions | None = None, *,
                   storage_options: Mapping[str, Any] | None = None,
                   staging: str | Path | None = None,
                   progress: Callable[[int], None] | None = None,
                   on_total: Callable[[int], None] | None = None,
                   log: list[str] | None = None) -> Index:
    """Pack `src` into the URL `url`; see the module docstring. Returns the index."""
    run = run or ConvertOptions()
    dest = Destination(url, storage_options)
    complete = dest.read_index() if run.resume else None
    if complete is not None:  # --resume of finished work: a no-op if it is this job
        _, _, job = plan_job(src, fmt, options or EncodeOptions(), run)
        check_same_job(dest.url, complete, job)
        return complete
    if run.resume and staging is None:
        raise ResumeRefused(
            f"{url}: --resume of a remote DST needs --staging DIR, the staging folder of the "
            "interrupted run (without it nothing of that run was kept); pass --overwrite to "
            "start over")
    dest.prepare(run.resume, run.overwrite)
    with staging_folder(staging) as (folder, owned):
        uploader = Uploader(dest, folder, drop_uploaded=owned,
                            present=dest.sizes() if run.resume else None, log=log)
        try:
            if run.resume and (folder / INDEX_NAME).is_file() \
                    and not (folder / STATE_DIR).exists():
                index = read_index(folder)  # staged completely; only the upload was cut short
            else:
                local = dataclasses.replace(  # shards carry the URL's name, not the staging's
                    run, overwrite=run.overwrite and not owned,
                    name=name_of(url) if run.name is None else run.name)
                index = convert_local(src, folder, fmt, options, local, progress=progress,
                                on_total=on_total, on_part=uploader.shards_done)
            uploader.commit(index)
        finally:
            uploader.close()
    return index
