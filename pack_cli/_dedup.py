"""`pack dedup`: groups of duplicate samples, and which of them cross splits.

A command of its own rather than `pack info --duplicates`: info reads only index.json
and stays instant with a fixed report, while a duplicate report can run long, has
options of its own (--near decodes every sample, with --distance and --workers) and
exits 1 when duplicates cross splits, so CI can gate on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from pack_cli._terminal import user_errors
from packer.dataset.duplicates import DuplicateReport, exact_duplicates
from packer.dataset.near import near_duplicates

SHOWN = 20  # groups the text report lists


@click.command("dedup")
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (every group).")
@click.option("--near", is_flag=True,
              help="Samples that look alike instead: a 64-bit dHash (9x8 grayscale) of "
                   "each sample, computed now (one decode pass), groups within --distance; "
                   "flat samples (too little detail for a dHash) by colour, among themselves.")
@click.option("--distance", type=click.IntRange(0, 16), default=4, show_default=True,
              help="--near: the most bits of 64 in which two hashes may differ.")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="--near: decoding threads (default: number of CPUs).")
def dedup_command(dst: Path, as_json: bool, near: bool, distance: int,
                  workers: int | None) -> None:
    """List samples of DST whose stored bytes are equal (by the digests in its table: no
    data is read), as groups of keys, the first the one `pack convert --drop-duplicates`
    keeps. With splits (`pack split`), each key's split is shown and a group that spans
    splits is flagged; the exit code is then 1.

    \b
    pack dedup photos.wds
    pack dedup photos.wds --json | jq .num_duplicates
    pack dedup photos.wds --near --distance 4
    """
    with user_errors():
        if not near and (distance != 4 or workers is not None):
            raise click.BadParameter("--distance and --workers apply to --near")
        report = near_duplicates(dst, distance, workers) if near else exact_duplicates(dst)
    click.echo(json.dumps(report.to_json(), indent=1, ensure_ascii=False) if as_json
               else render(report))
    if any(group.across_splits for group in report.groups):
        sys.exit(1)


def render(report: DuplicateReport) -> str:
    """A summary line, then the first SHOWN groups, one key a line."""
    crossing = sum(group.across_splits for group in report.groups)
    lines = [f"{report.path}: {len(report.groups)} group(s) of {report.kind} duplicates, "
             f"{report.num_duplicates} sample(s) beyond the first of their group"
             + (f"; {crossing} group(s) span splits" if crossing else "")]
    if report.splits_note:
        lines.append(f"note: splits not shown: {report.splits_note}")
    if report.num_flat:
        lines.append(f"{report.num_flat} flat sample(s) (too little detail for a dHash) "
                     "compared by colour, only with each other")
    for number, group in enumerate(report.groups[:SHOWN]):
        flag = ("  (flat: by colour)" if group.flat else "") + \
            ("  (spans splits)" if group.across_splits else "")
        lines.append(f"group {number + 1}{flag}:")
        for k, key in enumerate(group.keys):
            where = f" [{group.splits[k]}]" if group.splits is not None else ""
            kept = k == 0 and report.kind == "exact"  # what --drop-duplicates keeps
            lines.append(f"  {key}{where}" + (" (kept)" if kept else ""))
    if len(report.groups) > SHOWN:
        lines.append(f"... {len(report.groups) - SHOWN} more group(s): --json lists them all")
    return "\n".join(lines)
