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

Resume: `--staging DIR` is an ordinary resumable conversion, so `--resume --staging DIR`
continues it and uploads what the URL lacks (same name and size: not sent again).
Without `--staging` nothing of an interrupted run survives locally: `--resume` is refused
and `--overwrite` starts over.

Endpoint and credentials are whatever fsspec's filesystem for the protocol reads (s3fs:
the standard AWS variables AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION, or ~/.aws), plus `storage_options`, passed as they are to
`fsspec.filesystem(protocol, **storage_options)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packer.atomic import commit, fsync_file, partial_path
from packer.errors import (
    CorruptDatasetError,
    DatasetExistsError,
    IncompleteDatasetError,
    MissingDependencyError,
    PackError,
)
from packer.index import INDEX_NAME, KEYS_NAME, REJECTS_NAME, SAMPLES_NAME, Index, ShardInfo

if TYPE_CHECKING:
    from packer.convert import ConvertOptions
    from packer.encode import EncodeOptions

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
INSTALL_HINT = "run `pip install 'packer[s3]'` (fsspec and s3fs)"
CHECK_HINT = ("check the URL, that the bucket exists, and the endpoint and credentials "
              "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... or --storage-option KEY=VALUE)")
UPLOAD_THREADS = 4
# Written last, in this order, after every data file: the tables, then the index.
TABLES = (SAMPLES_NAME, KEYS_NAME, REJECTS_NAME)
OUR_NAMES = ("index.json", "samples.npy", "keys.npy", "rejects.jsonl", "data.lmdb", "data.h5",
             "images.npy", "labels.npy")
OUR_PATTERNS = ("shard-*.tar", "*.partial")


class RemoteError(PackError, OSError):
    """Remote storage refused or failed a request (URL, bucket, credentials, network)."""


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a URL (`s3://...`, `file://...`) rather than a local path."""
    return isinstance(path, str) and URL.match(path) is not None


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """['endpoint_url=http://host:9000', 'anon=false', 'client_kwargs.region_name=x'] -> dict.

    A value that parses as JSON is taken as JSON (true, 8, {"a": 1}, "quoted text"), any
    other as text; a dotted key fills a nested dict.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"storage option {pair!r} is not KEY=VALUE")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        *parents, last = key.strip().split(".")
        node = options
        for name in parents:
            child = node.setdefault(name, {})
            if not isinstance(child, dict):
                raise ValueError(f"storage option {pair!r}: {name} is already a value")
            node = child
        node[last] = value
    return options


def open_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of `url` and the path inside it (no trailing slash)."""
    try:
        import fsspec.core
    except ImportError as exc:
        raise MissingDependencyError(f"{url}: remote storage needs fsspec; {INSTALL_HINT}") \
            from exc
    try:
        fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:
        raise MissingDependencyError(f"{url}: {exc}; {INSTALL_HINT}") from exc
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{url}: {exc}; check the URL and the storage options") from exc
    return fs, str(root).rstrip("/")


def is_local(fs: Any) -> bool:
    protocol = fs.protocol
    return "file" in (protocol if isinstance(protocol, tuple | list) else (protocol,))


@contextlib.contextmanager
def remote_errors(url: str, doing: str) -> Iterator[None]:
    """Word a failed request as one line: what, where, and what to check."""
    try:
        yield
    except (PackError, MemoryError):
        raise
    except Exception as exc:  # s3fs, botocore and aiohttp raise many kinds
        raise RemoteError(f"{url}: cannot {doing} ({type(exc).__name__}: {exc}); "
                          f"{CHECK_HINT}") from exc


def ours(name: str) -> bool:
    """Whether a name below the prefix is one a conversion writes."""
    top = name.split("/", 1)[0]
    return top in OUR_NAMES or any(fnmatch.fnmatch(top, p) for p in OUR_PATTERNS)


def fetch(fs: Any, remote: str, local: Path, url: str, size: int | None = None) -> None:
    """Download `remote` to `local` under a temporary name, check its size, rename."""
    tmp = local.with_name(f"{local.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    try:
        with remote_errors(url, f"download {local.name}"):
            fs.get_file(remote, str(tmp))
        got = tmp.stat().st_size
        if size is not None and got != size:
            raise CorruptDatasetError(
                f"{url}/{local.name}: {got} bytes, but index.json says {size}; the remote "
                "dataset is damaged or being replaced, reconvert it")
        os.replace(tmp, local)
    finally:
        tmp.unlink(missing_ok=True)


def fetch_metadata(url: str, storage_options: Mapping[str, Any] | None,
                   folder: Path) -> bytes:
    """Download samples.npy and keys.npy of the dataset at `url` into `folder`.

    Returns the bytes of index.json (read first: no index.json, no dataset), which the
    caller writes last.
    """
    fs, root = open_fs(url, storage_options)
    with remote_errors(url, "read index.json"):
        try:
            raw: bytes = fs.cat_file(f"{root}/{INDEX_NAME}")
        except FileNotFoundError:
            raise IncompleteDatasetError(
                f"no {INDEX_NAME} at {url}: the conversion or its upload did not finish, or "
                f"the URL is wrong; rerun `pack convert SRC {url} --to FMT`") from None
    folder.mkdir(parents=True, exist_ok=True)
    for table in (SAMPLES_NAME, KEYS_NAME):
        fetch(fs, f"{root}/{table}", folder / table, url)
    return raw


def describe_remote(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`pack info` of a URL: its index and tables, fetched into a temporary folder."""
    from packer.cli_info import describe

    with tempfile.TemporaryDirectory(prefix="pack-info-") as tmp:
        folder = Path(tmp)
        (folder / INDEX_NAME).write_bytes(fetch_metadata(url, storage_options, folder))
        facts = describe(folder)
    facts["path"] = url
    return facts


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
        """The writer ended a part: send its finished shards (a hook of convert())."""
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
                and not name.endswith(".partial") and not name.startswith(".pack-state")]
        rest.sort(key=lambda name: (name in TABLES, TABLES.index(name) if name in TABLES else 0))
        for future in [self._pool.submit(self._upload, name) for name in rest]:
            future.result()
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
    from packer.convert import ConvertOptions, convert
    from packer.index import read_index
    from packer.journal import STATE_DIR, ResumeRefused

    run = run or ConvertOptions()
    if run.resume and staging is None:
        raise ResumeRefused(
            f"{url}: --resume of a remote DST needs --staging DIR, the staging folder of the "
            "interrupted run (without it nothing of that run was kept); pass --overwrite to "
            "start over")
    dest = Destination(url, storage_options)
    dest.prepare(run.resume, run.overwrite)
    with staging_folder(staging) as (folder, owned):
        uploader = Uploader(dest, folder, drop_uploaded=owned,
                            present=dest.sizes() if run.resume else None, log=log)
        try:
            if run.resume and (folder / INDEX_NAME).is_file() \
                    and not (folder / STATE_DIR).exists():
                index = read_index(folder)  # staged completely; only the upload was cut short
            else:
                local = dataclasses.replace(run, overwrite=run.overwrite and not owned)
                index = convert(src, folder, fmt, options, local, progress=progress,
                                on_total=on_total, on_part=uploader.shards_done)
            uploader.commit(index)
        finally:
            uploader.close()
    return index
