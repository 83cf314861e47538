"""The operations a caller of packer uses, each one call: the top layer of the package.

`verify` lives here, above both what it checks and what it compares with: a dataset's own
checks (packer.dataset.verify) and the comparison with its source (packer.source.compare),
which needs the scanners.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packer.conversion.job import ConvertOptions, convert
from packer.dataset.describe import describe
from packer.dataset.verify import Report, check_dataset
from packer.errors import PackError
from packer.source.compare import check_against_source

__all__ = ["ConvertOptions", "Report", "convert", "describe", "verify", "verify_remote"]


def verify(folder: str | Path, source: str | Path | None = None) -> Report:
    """Re-read every shard and sample; compare with the source when given."""
    folder = Path(folder)
    report = Report(str(folder))
    try:
        index, table = check_dataset(folder, report)
        if source is not None:
            check_against_source(folder, index, table, Path(source))
            report.checked.append("source images present with their labels")
    except PackError as exc:
        return report.fail(str(exc))
    return report


def verify_remote(url: str, storage_options: Mapping[str, Any] | None,
                  source: str | Path | None = None, work: str | Path | None = None) -> Report:
    """`verify` for a dataset behind a URL: downloaded whole into a temporary folder
    (under `work`, default the system's), checked, deleted. Problems name the URL."""
    from packer.dataset.remote import download_dataset  # fsspec is an optional extra

    with tempfile.TemporaryDirectory(prefix="pack-verify-", dir=work) as tmp:
        try:
            download_dataset(url, storage_options, Path(tmp))
            report = verify(tmp, source)
        except PackError as exc:
            report = Report(tmp).fail(str(exc))
    report.folder = url
    if report.problem is not None:
        report.problem = report.problem.replace(tmp, url.rstrip("/"))
    return report
