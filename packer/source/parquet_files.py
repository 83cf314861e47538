"""The files of a Parquet source: one .parquet file, a quoted glob of them,
a folder of them (the Hugging Face Hub's `data/train-00000-of-00002.parquet`; a folder
holding the shards of several splits is refused), or a folder that
`datasets.Dataset.save_to_disk` wrote (Arrow IPC files listed by its state.json).
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from packer.errors import SourceError
from packer.source.kinds import PARQUET, SAVED
from packer.source.members import ArchiveStat
from packer.source.parquet_read import TableFile, one_line, open_table

HF_SHARD = re.compile(r"(.+)-\d{5}-of-\d{5}")  # the Hub's `<split>-00000-of-00002`


def listing(path: Path) -> tuple[Path, list[Path]]:
    """What keys are relative to, and the files in key order."""
    if glob.has_magic(path.name):
        files = [Path(name) for name in glob.glob(str(path)) if os.path.isfile(name)]
        root = path.parent
    elif path.is_file():
        return path.parent, [path]
    elif (path / "dataset_dict.json").is_file():
        raise SourceError(f"{path}: a DatasetDict saved by save_to_disk; pass one split's "
                          f"folder ({path / 'train'}) as SRC")
    elif all((path / name).is_file() for name in SAVED):
        return path, _saved_files(path)
    else:
        files = [Path(where) / name for where, folders, names in os.walk(path)
                 for name in names if name.lower().endswith(PARQUET)
                 and not any(part.startswith(".") for part in Path(where, name)
                             .relative_to(path).parts)]
        root = path
    if not files:
        raise SourceError(f"{path}: no .parquet files found; pass a .parquet file or a "
                          "folder of them")
    files.sort(key=lambda file: os.path.relpath(file, root)[: -len(PARQUET)] + "/")
    splits = sorted({match.group(1) for file in files
                     if (match := HF_SHARD.fullmatch(file.name[: -len(PARQUET)]))})
    if len(splits) > 1:
        raise SourceError(f"{path}: holds the splits {', '.join(splits)}; convert one at a "
                          f"time: pass a quoted glob such as '{files[0].parent}/"
                          f"{splits[0]}-*.parquet'")
    return root, files


def _saved_files(folder: Path) -> list[Path]:
    """The Arrow files of a `save_to_disk` folder, as its state.json lists them."""
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [str(entry["filename"]) for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{folder / 'state.json'}: not a save_to_disk state ({exc}); "
                          "write the dataset with Dataset.to_parquet instead") from exc
    if state.get("_indices_data_files"):
        raise SourceError(f"{folder}: its rows are an indices mapping over the files; call "
                          "flatten_indices() before save_to_disk, or write it with to_parquet")
    if not names:
        raise SourceError(f"{folder}: state.json lists no data files")
    return [folder / name for name in names]


def describe(paths: list[Path]) -> tuple[list[TableFile], Any]:
    """Each file's kind, stat and row groups, and the schema they share."""
    files: list[TableFile] = []
    first: Any = None
    for path in paths:
        kind = "parquet" if path.name.lower().endswith(PARQUET) else "arrow"
        try:
            stat = ArchiveStat.of(path)
            schema, counts = _footer(TableFile(str(path), kind, stat, np.zeros(1, np.int64)))
        except Exception as exc:  # pyarrow's errors for a damaged file are many
            if isinstance(exc, OSError) and exc.errno is not None:  # not pyarrow's own
                raise SourceError(f"{path}: cannot read the file ({exc.strerror})") from exc
            raise SourceError(f"{path}: not a readable {kind} file ({one_line(exc)}); "
                              "re-download or re-write it") from exc
        if first is not None and not schema.remove_metadata().equals(first.remove_metadata()):
            raise SourceError(f"{path}: its columns differ from those of {paths[0]}; convert "
                              "the files apart")
        first = schema if first is None else first
        starts = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        files.append(TableFile(str(path), kind, stat, starts))
    if not sum(int(file.starts[-1]) for file in files):
        raise SourceError(f"{paths[0].parent if len(paths) > 1 else paths[0]}: no rows; "
                          "nothing to convert")
    return files, first


def _footer(file: TableFile) -> tuple[Any, list[int]]:
    """The schema and the rows of each row group (record batch) of a file."""
    handle = open_table(file)
    if file.kind == "parquet":
        meta = handle.metadata
        counts = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        schema = handle.schema_arrow
        handle.close()
        return schema, counts
    if not handle:
        raise ValueError("an Arrow file without record batches")
    return handle[0].schema, [batch.num_rows for batch in handle]


