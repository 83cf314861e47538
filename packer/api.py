"""The operations a caller of packer uses, each one call: the top layer of the package.

`convert`, `verify` and `describe` each take a folder or a URL, and are the one place
that tells the two apart (the CLI calls them too): a URL DST of `convert` goes through a
staging folder and an upload (`convert_remote`), which itself runs the local
conversion, so the conversion engine never asks where its output ends up.
`verify` lives here, above both what it checks and what it compares with: a dataset's own
checks (`check_dataset`) and the comparison with its source (`check_against_source`),
which needs the scanners.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packer.conversion.append import AppendResult, append
from packer.conversion.job import ConvertOptions, convert_local
from packer.conversion.rebuild import source_records
from packer.core.index import INDEX_NAME, Index, open_dataset
from packer.dataset.describe import Description
from packer.dataset.describe import describe as describe_folder
from packer.dataset.open import is_url
from packer.dataset.repair import repair_dataset, repair_targets
from packer.dataset.verify import Report, check_dataset
from packer.encode import EncodeOptions
from packer.errors import PackError
from packer.source.compare import check_against_source
from packer.source.wds_remote import fetch_shards

__all__ = ["AppendResult", "ConvertOptions", "Report", "append", "convert", "describe",
           "holds_complete", "verify"]


def convert(src: str | Path, dst: str | Path, fmt: str, encode: EncodeOptions | None = None,
            run: ConvertOptions | None = None, *,
            storage_options: Mapping[str, Any] | None = None,
            staging: str | Path | None = None,
            progress: Callable[[int], None] | None = None,
            on_total: Callable[[int], None] | None = None) -> Index:
    """Pack `src` into `dst` in format `fmt`; returns the index of the complete dataset.

    `dst` is a folder, or a URL (s3://bucket/prefix, file:///path) written through a
    staging folder (`staging`, default a temporary one) with fsspec `storage_options`.
    A URL `src` names webdataset shards (a brace list or their folder), downloaded once
    into the shard cache (`fetch_shards`) with the same `storage_options`.
    `encode` says how each sample is stored (`EncodeOptions`: size, codec, checks), `run`
    how the conversion runs (`ConvertOptions`: workers, resume, shards, fields), as
    `append` takes them. `progress` gets a count of inputs done, `on_total` the number
    of inputs.
    """
    remote_src = is_url(src)
    if remote_src:  # webdataset shards at a URL: read from the local shard cache
        src = fetch_shards(str(src), storage_options)
    if is_url(dst):
        from packer.conversion.upload import convert_remote  # fsspec is an optional extra

        return convert_remote(src, str(dst), fmt, encode, run, storage_options=storage_options,
                              staging=staging, progress=progress, on_total=on_total)
    if staging is not None or (storage_options and not remote_src):
        raise ValueError(f"{dst}: storage_options and staging apply to a URL DST "
                         "(s3://bucket/prefix, file:///path) or a URL SRC of shards")
    return convert_local(src, Path(dst), fmt, encode, run, progress=progress,
                         on_total=on_total)


def holds_complete(dst: str | Path, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether DST (a folder or a URL) holds a complete dataset: a `--resume` of it
    converts nothing (the CLI asks first, to say so)."""
    if is_url(dst):
        from packer.conversion.upload import Destination  # fsspec is an optional extra

        return Destination(str(dst), storage_options).read_index() is not None
    return (Path(dst) / INDEX_NAME).is_file()


def verify(folder: str | Path, source: str | Path | None = None,
           annotations: str | Path | None = None, *,
           storage_options: Mapping[str, Any] | None = None,
           work: str | Path | None = None, repair: bool = False) -> Report:
    """Re-read every shard and sample, listing every damaged one in the report; compare
    with the source when given (and with the COCO `annotations` file it was converted with).

    `repair`: rewrite the damaged files from `source` first (`repair_dataset`),
    then verify again; the report's `repaired` names the files rewritten. A source whose
    item for a damaged key is missing or differs is refused (PackError naming the key).
    `folder` may be a URL (s3://bucket/prefix, file:///path): the dataset is downloaded
    whole into a temporary folder under `work` (default the system's) with fsspec
    `storage_options`, checked and deleted; problems then name the URL."""
    if repair:
        return _verify_repaired(folder, source, annotations)
    if is_url(folder):
        return _verify_url(str(folder), storage_options, source, annotations, work)
    if storage_options or work is not None:
        raise ValueError(f"{folder}: storage_options and work apply to a URL "
                         "(s3://bucket/prefix, file:///path)")
    folder = Path(folder)
    report = Report(str(folder))
    try:
        index, table = check_dataset(folder, report)
        if source is not None:
            check_against_source(folder, index, table, Path(source),
                                 None if annotations is None else Path(annotations))
            report.checked.append("source images present with their labels")
    except PackError as exc:
        return report.fail(str(exc))
    return report


def _verify_repaired(folder: str | Path, source: str | Path | None,
                     annotations: str | Path | None) -> Report:
    """Verify; rewrite the damaged files from `source`; verify again, with the source."""
    if source is None or is_url(folder):
        raise ValueError(f"{folder}: --repair needs --source SRC (what DST was converted "
                         "from) and a local DST")
    report = verify(folder)
    if report.ok:
        return verify(folder, source, annotations)
    index, _ = open_dataset(Path(folder))
    names = repair_targets(index, report.damaged, list(report.damaged_files))
    if not names:  # the damage is in index.json or the tables: nothing to rewrite
        raise PackError(f"{report.problem}; --repair rewrites data files only, reconvert")
    records = source_records(Path(source), index, Path(folder),
                             None if annotations is None else Path(annotations))
    repaired = repair_dataset(Path(folder), names, records, str(source))
    after = verify(folder, source, annotations)
    after.repaired = repaired
    return after


def _verify_url(url: str, storage_options: Mapping[str, Any] | None,
                source: str | Path | None, annotations: str | Path | None,
                work: str | Path | None) -> Report:
    from packer.dataset.urls import download_dataset  # fsspec is an optional extra

    with tempfile.TemporaryDirectory(prefix="pack-verify-", dir=work) as tmp:
        try:
            download_dataset(url, storage_options, Path(tmp))
            report = verify(tmp, source, annotations)
        except PackError as exc:
            report = Report(tmp).fail(str(exc))
    report.folder = url
    if report.problem is not None:
        report.problem = report.problem.replace(tmp, url.rstrip("/"))
    return report


def describe(dst: str | Path, *, storage_options: Mapping[str, Any] | None = None
             ) -> Description:
    """What `pack info` shows: format, samples, classes, shards, options, rejects.

    `dst` may be a URL: its index and tables are fetched (not the shards)."""
    if is_url(dst):
        from packer.dataset.urls import describe_remote  # fsspec is an optional extra

        return describe_remote(str(dst), storage_options)
    if storage_options:
        raise ValueError(f"{dst}: storage_options apply to a URL (s3://bucket/prefix, "
                         "file:///path)")
    return describe_folder(Path(dst))
