"""`pack split`: train/val/test index files inside DST, decided by key hash."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from pack_cli._terminal import user_errors
from packer.dataset.splits import split


@click.command("split")
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--val", type=float, required=True, help="Fraction of samples for val.")
@click.option("--test", type=float, default=0.0, show_default=True,
              help="Fraction of samples for test (0: no test split).")
@click.option("--stratify", is_flag=True,
              help="Meet the fractions within each label, not only overall.")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="Seeds the key hash: another seed, another split.")
@click.option("--force", is_flag=True,
              help="Replace splits made with other settings (this moves samples between "
                   "splits).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def split_command(dst: Path, val: float, test: float, stratify: bool, seed: int, force: bool,
                  as_json: bool) -> None:
    """Write DST/splits/{train,val,test}.npy (sample indices) and split.json; no data is copied.

    A sample's split depends on the hash of (seed, key) only, against thresholds chosen
    when its group (its label, with --stratify) is first split so that the group gets
    its fraction within rounding; a rerun with the same settings, after samples were
    appended, keeps the thresholds: no sample already split moves. Read a split with
    readers.PackedDataset(DST, split="val").

    \b
    pack split photos.wds --val 0.05
    pack split photos.wds --val 0.05 --test 0.05 --stratify --seed 1
    """
    with user_errors():
        report = split(dst, val, test, stratify=stratify, seed=seed, force=force)
    if as_json:
        click.echo(json.dumps(asdict(report), indent=1, ensure_ascii=False))
        return
    counts = ", ".join(f"{name} {count}" for name, count in report.counts.items())
    kept = f"; thresholds of {report.kept_thresholds} group(s) kept from the earlier split" \
        if report.kept_thresholds else ""
    click.echo(f"split {dst}: {counts}{kept} (written to {dst / 'splits'})")
