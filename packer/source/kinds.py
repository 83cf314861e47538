"""What kind of source SRC is, told from its name and a look at its files before anything
is read: `kind_of` answers the first kind that fits, in this order.

    webdataset shards   a brace list (`shards-{000000..000099}.tar`: numeric ranges keep
                        their zero padding, `{a,b}` lists are alternatives, as braceexpand
                        reads them; every shard must exist); a .tar/.tgz whose samples lie
                        at its top level (`KEY.jpg`, `KEY.cls`) or that holds `.cls`
                        members; a folder of shards and no sub-folder (img2dataset's)
    Parquet             a .parquet file, a quoted glob of them, a folder of them and no
                        images or tars, or a folder `datasets.Dataset.save_to_disk` wrote
    an archive          .tar, .tgz, .zip (a compressed tar of another kind is refused)
    a manifest          a .csv or .jsonl file; a .json file is COCO annotations
    a packed dataset    a folder with index.json (or an unfinished conversion's files)
    an image folder     any other folder

Images are the names with an image extension (`image_name`), in an archive as in a
folder. Shards are taken in name order, so sample i is the same on every run. `Source` is
what the scan of every kind returns.
"""

from __future__ import annotations

import glob
import os
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packer.core.layout import INDEX_NAME, KEYS_NAME, SAMPLES_NAME, STATE_DIR
from packer.errors import SourceError

if TYPE_CHECKING:
    from packer.core.fields import FieldSpec
    from packer.core.record import Reject
    from packer.source.items import SourceItems
    from packer.source.members import ArchiveSource
    from packer.source.packed import PackedSource
    from packer.source.parquet_read import ParquetSource
    from packer.source.shardset import ShardSet

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
)
SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz")
GZIPPED_TAR = (".tar.gz", ".tgz")
COMPRESSED_TAR = (".tar.bz2", ".tbz2", ".tar.xz", ".txz")  # refused: decompress them
BRACE = re.compile(r"\{([^{}]*)\}")
PROBED = 64  # members an archive's layout is told from
RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)")
MAX_SHARDS = 1_000_000  # a brace list beyond this is a typo, not a dataset
PARQUET = ".parquet"
SAVED = ("state.json", "dataset_info.json")  # what datasets' save_to_disk writes
SEARCH_DEPTH = 3  # folder levels searched for .parquet files (Hub: <config>/<split>/)
Kind = Literal["shards", "parquet", "archive", "manifest", "coco", "packed", "folder"]
FILE_KINDS: dict[str, Kind] = {".csv": "manifest", ".jsonl": "manifest", ".json": "coco"}


@dataclass(frozen=True)
class Source:
    """What a scan found: items to encode, class names, early rejects, ignored files.

    `archive` is set when SRC's items are read in place: the members of a .tar or .zip (read
    as the extracted files would be), webdataset shards or Parquet files. `origin` is set
    when SRC is a packed dataset: its items are that dataset's samples, in its order, and
    `origin` reads their bytes; `inherited` are the rejects of the conversion that made it
    (they carry over, so the lineage to the images stays whole).
    """

    root: Path
    items: SourceItems
    class_names: tuple[str, ...]
    rejects: list[Reject]
    num_ignored: int = 0
    origin: PackedSource | None = None
    inherited: list[Reject] = field(default_factory=list)
    # SRC is an archive (or webdataset shards, or Parquet files): reads its items in place
    archive: ArchiveSource | ShardSet | ParquetSource | None = None
    fields: tuple[FieldSpec, ...] = ()  # per-sample fields (`FieldChoice` chose them)
    extra: dict[str, Any] = field(default_factory=dict)  # for index.json's extra (COCO)



def image_name(name: str) -> bool:
    """A visible name with an image extension (what pathlib calls the suffix)."""
    dot = name.rfind(".")
    return dot > 0 and not name.startswith(".") and name[dot:].lower() in IMAGE_EXTENSIONS


def is_utf8(name: str) -> bool:
    """False for names holding undecodable bytes (surrogate escapes from the file system)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def archive_kind(path: Path) -> str | None:
    """"tar", "tgz", "zip", "compressed tar", or None when the name is not an archive's."""
    name = path.name.lower()
    if name.endswith(GZIPPED_TAR):
        return "tgz"
    if name.endswith(COMPRESSED_TAR):
        return "compressed tar"
    if name.endswith(".tar"):
        return "tar"
    return "zip" if name.endswith(".zip") else None


def is_packed(path: Path) -> bool:
    """A folder holding index.json, or what a conversion leaves before writing it last."""
    return path.is_dir() and any((path / name).exists()
                                 for name in (INDEX_NAME, SAMPLES_NAME, KEYS_NAME, STATE_DIR))


def kind_of(src: str | Path) -> tuple[Kind | None, list[Path]]:
    """SRC's kind, with its shards when it is webdataset shards; None when SRC is no such
    file or folder, or a file of no kind."""
    path = Path(src)
    if has_braces(str(src)):
        return "shards", brace_shards(str(src))
    archive = path.is_file() and archive_kind(path) is not None
    if archive and looks_like_wds(path):
        return "shards", [path]
    shards = folder_shards(path) if path.is_dir() and not is_packed(path) else None
    if shards is not None:
        return "shards", shards
    if is_parquet_source(path):
        return "parquet", []
    if path.is_file():
        return ("archive" if archive else FILE_KINDS.get(path.suffix.lower())), []
    if path.is_dir():
        return ("packed" if is_packed(path) else "folder"), []
    return None, []


def is_shard_name(name: str) -> bool:
    """A file name a webdataset shard has."""
    return name.lower().endswith(SHARD_SUFFIXES) and not name.startswith(".")


def has_braces(text: str) -> bool:
    return BRACE.search(text) is not None


def expand_braces(pattern: str) -> list[str]:
    """Every name a brace pattern spells, in its order (`a{1..3}` -> a1, a2, a3)."""
    match = BRACE.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    inner = match.group(1)
    span = RANGE.fullmatch(inner)
    if span is not None:
        first, last = span.group(1), span.group(2)
        step = 1 if int(last) >= int(first) else -1
        count = abs(int(last) - int(first)) + 1
        if count > MAX_SHARDS:
            raise SourceError(f"{pattern}: the range {{{inner}}} names {count} shards; "
                              f"at most {MAX_SHARDS}")
        width = len(first) if first.lstrip("-").startswith("0") else 0
        choices = [str(n).zfill(width) for n in range(int(first), int(last) + step, step)]
    else:
        choices = inner.split(",")
    return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def brace_shards(pattern: str) -> list[Path]:
    """The shard files of a brace list; every one must exist."""
    paths = [Path(name) for name in expand_braces(pattern)]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SourceError(f"{pattern}: shard {missing[0]} does not exist{more}; fix the "
                          "brace list or download the missing shards")
    return paths


def folder_shards(folder: Path) -> list[Path] | None:
    """The shards of a folder of shards, in name order; None when the folder holds a
    sub-folder (an image folder) or no shard."""
    shards: list[Path] = []
    try:
        for entry in folder.iterdir():
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                return None
            if is_shard_name(entry.name) and entry.is_file():
                shards.append(entry)
    except OSError as exc:
        raise SourceError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from exc
    return sorted(shards) or None


def looks_like_wds(path: Path) -> bool:
    """Whether an archive holds webdataset samples rather than class folders: among its
    first members, an image or `.cls` file at the top level, or any `.cls` member.
    Damage and other archive kinds answer False (the archive scan words the error)."""
    if not path.name.lower().endswith(SHARD_SUFFIXES):
        return False
    try:
        with tarfile.open(path, "r|*") as tar:
            for _ in range(PROBED):
                member = tar.next()
                if member is None:
                    return False
                if member.isfile() and _sample_member(member.name):
                    return True
    except (tarfile.TarError, OSError, EOFError, zlib.error):
        return False
    return False


def _sample_member(name: str) -> bool:
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or parts[-1].startswith("."):
        return False
    suffix = parts[-1].rpartition(".")[2].lower()
    return suffix == "cls" or (len(parts) == 1 and "." + suffix in IMAGE_EXTENSIONS
                               and not parts[-1].lower().endswith(".tar"))


def is_parquet_source(path: Path) -> bool:
    """A .parquet file, a glob of them, a `save_to_disk` folder, or a folder holding
    .parquet files and, down to SEARCH_DEPTH levels, no images and no tars (an image
    folder with a metadata.parquet, and img2dataset's shards with theirs, are not)."""
    if path.name.lower().endswith(PARQUET):
        return path.is_file() or glob.has_magic(path.name)
    if not path.is_dir() or (path / "index.json").exists():
        return False
    if all((path / name).is_file() for name in SAVED) or (path / "dataset_dict.json").is_file():
        return True
    return _holds_only_parquet(path)


def _holds_only_parquet(folder: Path) -> bool:
    found = False
    pending = [(str(folder), 0)]
    while pending:
        where, level = pending.pop()
        try:
            with os.scandir(where) as listing:
                for entry in listing:
                    name = entry.name.lower()
                    if name.startswith("."):
                        continue
                    if image_name(name) or name.endswith(SHARD_SUFFIXES):
                        return False
                    found = found or name.endswith(PARQUET)
                    if level < SEARCH_DEPTH and entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, level + 1))
        except OSError:
            continue
    return found


def root_prefix(root: Path) -> str:
    """What joins the root to a relative path, spelled as pathlib's `root / rel` spells it."""
    text = str(root)
    return "" if text == "." else os.path.join(text, "")
