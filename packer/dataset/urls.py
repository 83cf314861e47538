"""fsspec URLs (`s3://bucket/prefix`, `file:///path`): their filesystems and errors.

Writing into a URL (a conversion's upload) and reading from one (the readers' remote
source) both open the filesystem here: endpoint and credentials are whatever fsspec's
filesystem for the protocol reads (s3fs: the standard AWS variables AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or ~/.aws), plus
`storage_options`, passed as they are to
`fsspec.filesystem(protocol, **storage_options)`. fsspec is an optional extra
(`pip install 'packer-readers[s3]'`), imported only when a URL is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packer import formats
from packer.core.index import (
    FIELDS_NAME,
    INDEX_NAME,
    KEYS_NAME,
    REJECTS_NAME,
    SAMPLES_NAME,
    Index,
    parse_index,
)
from packer.errors import (
    CorruptDatasetError,
    IncompleteDatasetError,
    MissingDependencyError,
    PackError,
    install_line,
)
from packer.errors import RemoteError as RemoteError  # defined with every error class
from packer.storage.files import Piece, file_problem, sha256_file

if TYPE_CHECKING:
    from packer.dataset.describe import Description

INSTALL_HINT = f"run `{install_line('s3')}` (fsspec and s3fs)"
CHECK_HINT = ("check the URL, that the bucket exists, and the endpoint and credentials "
              "(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... or --storage-option KEY=VALUE)")


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


def fetch(fs: Any, remote: str, local: Path, url: str, size: int | None = None,
          sha256: str | None = None, pieces: Sequence[Piece] = ()) -> None:
    """Download `remote` to `local` under a temporary name, check it, rename.

    The size, and the sha256 (of its `pieces`, when it has) when given, must be what
    index.json says: a shard damaged in storage or in transit never reaches a reader
    (hashing a shard from the page cache costs little beside downloading it).
    """
    tmp = local.with_name(f"{local.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")
    try:
        with remote_errors(url, f"download {local.name}"):
            fs.get_file(remote, str(tmp))
        got = tmp.stat().st_size
        if size is not None and got != size:
            raise CorruptDatasetError(
                f"{url}/{local.name}: {got} bytes, but index.json says {size}; the remote "
                "dataset is damaged or being replaced, reconvert it")
        if sha256 is not None and pieces and (problem := file_problem(tmp, sha256, pieces)):
            raise CorruptDatasetError(f"{url}/{local.name}: {problem}; the remote copy is "
                                      "damaged, upload or reconvert it again")
        if sha256 is not None and not pieces and (digest := sha256_file(tmp)) != sha256:
            raise CorruptDatasetError(
                f"{url}/{local.name}: sha256 {digest[:16]}..., but index.json says "
                f"{sha256[:16]}...; the remote copy is damaged, upload or reconvert it again")
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
    with_fields = _names_fields(raw)
    for table in (SAMPLES_NAME, KEYS_NAME) + ((FIELDS_NAME,) if with_fields else ()):
        fetch(fs, f"{root}/{table}", folder / table, url)
    return raw


def _names_fields(raw: bytes) -> bool:
    """Whether an index.json lists fields (then fields.npy belongs to the tables)."""
    try:
        return bool(json.loads(raw).get("fields"))
    except (ValueError, AttributeError):
        return False  # parse_index says what is wrong with it


def download_dataset(url: str, storage_options: Mapping[str, Any] | None,
                     folder: Path) -> Index:
    """Copy the dataset at `url` into `folder`: tables, every shard (size and sha256
    checked), rejects.jsonl when there is one, and index.json last, so an interrupted
    download is refused like an interrupted conversion."""
    raw = fetch_metadata(url, storage_options, folder)
    index = parse_index(raw, Path(url) / INDEX_NAME)
    fs, root = open_fs(url, storage_options)
    for shard in index.shards:
        local = folder / shard.name
        local.parent.mkdir(parents=True, exist_ok=True)
        fetch(fs, f"{root}/{shard.name}", local, url, shard.num_bytes, shard.sha256,
              shard.pieces)
    module = formats.load(index.format)
    for name in (*module.side_files(index), *module.kept_files(index)):  # verify checks them
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        fetch(fs, f"{root}/{name}", folder / name, url)
    with remote_errors(url, f"look for {REJECTS_NAME}"):
        rejects = fs.exists(f"{root}/{REJECTS_NAME}")
    if rejects:
        fetch(fs, f"{root}/{REJECTS_NAME}", folder / REJECTS_NAME, url)
    (folder / INDEX_NAME).write_bytes(raw)
    return index


def describe_remote(url: str, storage_options: Mapping[str, Any] | None) -> Description:
    """`pack info` of a URL: its index and tables, fetched into a temporary folder."""
    from packer.dataset.describe import describe

    with tempfile.TemporaryDirectory(prefix="pack-info-") as tmp:
        folder = Path(tmp)
        (folder / INDEX_NAME).write_bytes(fetch_metadata(url, storage_options, folder))
        facts = describe(folder)
    facts["path"] = url
    return facts
