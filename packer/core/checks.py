"""Validation of a dataset's index files: damaged or hostile ones fail with CorruptDatasetError.

index.json and the per-sample table come from disk, so anything can be in them: wrong
types, negative or huge counts, `Infinity`, shard names that climb out of the folder,
key positions past the end of keys.npy. Readers, `pack info` and `pack verify` trust
what passes here (a reader never opens a file outside the dataset folder, and a label
is always a class of the dataset); everything else is one line that names the file.
The per-sample checks are vectorised, so they stay cheap however many rows there are.
The digests that tie the data to the table are computed here too.
"""

from __future__ import annotations

import json
import mmap
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt
import xxhash

from packer.core.layout import FORMAT_NAMES as KNOWN_FORMATS
from packer.errors import CorruptDatasetError

SHARD_FIELDS = ("name", "num_samples", "num_bytes", "sha256")
SHORT = 60  # characters of a bad value quoted in a message


def bad_field(path: Path, what: str) -> CorruptDatasetError:
    """index.json parses but says something impossible."""
    return CorruptDatasetError(f"{path}: missing or bad field ({what}); the index is damaged, "
                               "reconvert the dataset")


def damaged(path: Path, what: str) -> CorruptDatasetError:
    """The per-sample table cannot be right."""
    return CorruptDatasetError(f"{path}: {what}; the per-sample table is damaged, reconvert "
                               "the dataset")


def no_constant(name: str) -> None:
    """JSON has no NaN or Infinity (Python's parser accepts them unless told)."""
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def one_line(error: BaseException) -> str:
    """A library's error text for our one-line messages: no newlines, not too long."""
    text = " ".join(str(error).split())
    return text if len(text) <= 3 * SHORT else text[: 3 * SHORT] + "..."


def quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHORT else text[:SHORT] + "..."


def load_array(path: Path, mmap: bool = True) -> npt.NDArray[Any]:
    """An .npy file as an array, memory-mapped by default; unreadable -> CorruptDatasetError.

    numpy's header parser raises whatever its tokenizer or evaluator meets (ValueError,
    EOFError, SyntaxError, tokenize.TokenError, MemoryError...), so any failure to load
    counts as damage.
    """
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as exc:
        raise CorruptDatasetError(f"{path}: unreadable ({type(exc).__name__}: {one_line(exc)}); "
                                  "restore it or reconvert the dataset") from exc
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise CorruptDatasetError(f"{path}: not an .npy array; reconvert the dataset")
    return array


def digest_of(data: bytes | memoryview) -> bytes:
    """The content hash of a sample (or field record) that the per-sample table stores and
    every read checks: xxh3-128, fast and non-cryptographic."""
    return xxhash.xxh3_128_digest(data)


def files_digest(paths: tuple[Path, ...]) -> str:
    """xxh3-128 of the files' bytes in order, read through memory maps (no copies)."""
    digest = xxhash.xxh3_128()
    for path in paths:
        try:
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0,
                                                       access=mmap.ACCESS_READ) as mapped:
                digest.update(mapped)
        except ValueError:  # an empty file cannot be mapped: nothing to add
            continue
        except OSError as exc:
            raise CorruptDatasetError(f"{path}: unreadable ({exc.strerror}); restore it or "
                                      "reconvert the dataset") from exc
    return str(digest.hexdigest())


def table_matches(paths: tuple[Path, ...], expected: Any) -> None:
    """samples.npy and keys.npy (and fields.npy) are the ones index.json was written with
    (if it says)."""
    if expected is not None and files_digest(paths) != expected:
        raise CorruptDatasetError(
            f"{paths[0]}: the per-sample table (labels, keys, locations) does not match "
            f"index.json; restore {paths[0].name} and {paths[1].name} or reconvert the dataset"
        )


def version_and_format(data: Any, path: Path, versions: tuple[int, ...]) -> str:
    """The format of a JSON object of a version this toolkit reads; anything else is
    refused."""
    if not isinstance(data, dict):
        raise CorruptDatasetError(f"{path}: expected a JSON object; reconvert the dataset")
    version = data.get("format_version")
    if isinstance(version, bool) or version not in versions:
        raise CorruptDatasetError(
            f"{path}: format_version {quote(version)} is not supported (this toolkit reads "
            f"{', '.join(map(str, versions))}); upgrade the toolkit or reconvert the dataset"
        )
    fmt = data.get("format")
    if not isinstance(fmt, str) or fmt not in KNOWN_FORMATS:
        raise CorruptDatasetError(
            f"{path}: unknown format {quote(fmt)} (this toolkit reads "
            f"{', '.join(KNOWN_FORMATS)}); upgrade the toolkit or reconvert the dataset"
        )
    return fmt


def count(data: dict[str, Any], name: str, path: Path, default: int | None = None) -> int:
    """A non-negative integer field (not a bool, float or string)."""
    if name not in data and default is not None:
        return default
    if name not in data:
        raise bad_field(path, f"missing field {name!r}")
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise bad_field(path, f"{name} must be a whole number >= 0, not {quote(value)}")
    return value


def text(data: dict[str, Any], name: str, path: Path) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise bad_field(path, f"{name} must be a string, not {quote(value)}")
    return value


def mapping(data: dict[str, Any], name: str, path: Path) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise bad_field(path, f"{name} must be an object, not {quote(value)}")
    return value


def class_names(data: dict[str, Any], path: Path) -> tuple[str, ...]:
    names = data.get("class_names")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise bad_field(path, f"class_names must be a list of strings, not {quote(names)}")
    return tuple(names)


def image_size(data: dict[str, Any], path: Path) -> tuple[int, int] | None:
    size = data.get("image_size")
    if size is None:
        return None
    if not isinstance(size, list) or len(size) != 2 or not all(
            isinstance(side, int) and not isinstance(side, bool) and side > 0 for side in size):
        raise bad_field(path, f"image_size must be [height, width], not {quote(size)}")
    return int(size[0]), int(size[1])


def shard_fields(shard: Any, path: Path) -> dict[str, Any]:
    """One entry of `shards`: its four fields (and npy's pieces), a name that stays
    inside the folder."""
    if not isinstance(shard, dict) or sorted(set(shard) - {"pieces"}) != sorted(SHARD_FIELDS):
        raise bad_field(path, f"a shard must have the fields {', '.join(SHARD_FIELDS)}, not "
                            f"{quote(shard)}")
    name = text(shard, "name", path)
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or "\\" in name or "\0" in name \
            or any(part in ("..", ".") for part in parts) or name != "/".join(parts):
        raise bad_field(path, f"shard name {quote(name)} is not a plain path inside the folder")
    num_bytes = count(shard, "num_bytes", path)
    fields: dict[str, Any] = {"name": name, "num_samples": count(shard, "num_samples", path),
                              "num_bytes": num_bytes, "sha256": text(shard, "sha256", path)}
    if "pieces" in shard:
        fields["pieces"] = pieces(shard["pieces"], num_bytes, path)
    return fields


def pieces(value: Any, num_bytes: int, path: Path) -> tuple[tuple[int, str], ...]:
    """A shard's pieces: [bytes, sha256 hex] pairs whose sizes add up to the file's."""
    ok = isinstance(value, list) and value and all(
        isinstance(piece, list) and len(piece) == 2 and isinstance(piece[0], int)
        and not isinstance(piece[0], bool) and piece[0] >= 0 and isinstance(piece[1], str)
        for piece in value)
    if not ok or sum(piece[0] for piece in value) != num_bytes:
        raise bad_field(path, f"a shard's pieces must be [bytes, sha256] pairs adding up to "
                              f"its {num_bytes} bytes, not {quote(value)}")
    return tuple((int(size), str(digest)) for size, digest in value)


def check_rows(rows: npt.NDArray[np.void], keys: npt.NDArray[np.uint8], num_classes: int,
               path: Path) -> None:
    """The per-sample table is usable: key positions inside keys.npy, labels of a class."""
    if rows.ndim != 1 or keys.ndim != 1:
        raise damaged(path, "the per-sample table has the wrong shape")
    if not len(rows):
        return
    starts = rows["key_start"]
    if starts[0] != 0 or starts[-1] > len(keys) or bool(np.any(np.diff(starts) < 0)):
        raise damaged(path, "key positions do not fit keys.npy")
    labels = rows["label"]
    if int(labels.min()) < 0 or int(labels.max()) >= num_classes:
        raise damaged(path, f"a label is outside the {num_classes} classes")
    if int(rows["offset"].min()) < -1 or int(rows["size"].min()) < 0:
        raise damaged(path, "a sample has a negative offset or size")
