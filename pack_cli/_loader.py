"""`pack bench`, `pack tune`, `pack profile`: measure data loading on this machine.

These commands need torch; it is imported inside each command, so `pack convert`
keeps working where torch is not installed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from pack_cli._terminal import user_errors
from packer.imaging.crop_extension import status as crop_decode_status


def parse_ints(text: str, name: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: expected a list like 0,1,2,4", param_hint=name) \
            from exc
    if not values or min(values) < 0:
        raise click.BadParameter(f"{text!r}: expected non-negative numbers", param_hint=name)
    return values


def default_workers() -> str:
    """0, 1, 2, 4, ... up to the number of CPUs."""
    cpus = os.cpu_count() or 1
    counts = {0, cpus} | {2**k for k in range(8) if 2**k <= cpus}
    return ",".join(str(w) for w in sorted(counts))


def sweep_options(func: Any) -> Any:
    options = [
        click.option("--workers", "workers_text", default=default_workers(), show_default=True,
                     help="num_workers values to sweep."),
        click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True),
        click.option("--prefetch", "prefetch_text", default="2", show_default=True,
                     help="prefetch_factor values to sweep (ignored with 0 workers)."),
        click.option("--pin-memory/--no-pin-memory", default=False, show_default=True),
        click.option("--size", type=click.IntRange(1), default=224, show_default=True,
                     help="Decode to SIZE x SIZE."),
        click.option("--seconds", type=click.FloatRange(0.5), default=5.0, show_default=True,
                     help="Time budget per configuration (stops early once stable)."),
        click.option("--json", "as_json", is_flag=True, help="Machine-readable output."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def run_sweep(path: Path, workers_text: str, batch_size: int, prefetch_text: str,
              pin_memory: bool, size: int, seconds: float) -> tuple[Any, list[Any]]:
    from readers.diagnostics.sweep import open_for_bench, sweep
    from readers.diagnostics.tuning import LoaderConfig

    dataset = open_for_bench(path, size)
    configs = [LoaderConfig(w, p if w else None, batch_size, pin_memory)
               for w in parse_ints(workers_text, "--workers")
               for p in (parse_ints(prefetch_text, "--prefetch") if w else [0])]
    with tqdm(total=len(configs), disable=not sys.stderr.isatty(), desc="sweep") as bar:
        def advance(_: object) -> None:
            bar.update(1)

        results = sweep(dataset, configs, seconds, progress=advance)
    return dataset, results


def rows(results: list[Any]) -> list[dict[str, Any]]:
    return [{"num_workers": r.config.num_workers, "prefetch_factor": r.config.prefetch_factor,
             "batch_size": r.config.batch_size, "pin_memory": r.config.pin_memory,
             "images_per_s": round(r.images_per_s, 1), "batches_per_s": round(r.batches_per_s, 2),
             "median_wait_ms": round(r.median_wait_s * 1e3, 2),
             "p95_wait_ms": round(r.p95_wait_s * 1e3, 2),
             "peak_memory_mib": round(r.peak_memory_bytes / 2**20, 1)} for r in results]


def table(results: list[Any]) -> str:
    lines = ["| workers | prefetch | batch | pin | images/s | batches/s | wait median ms | "
             "wait p95 ms | peak MiB |", "|" + " ---: |" * 9]
    for row in rows(results):
        lines.append("| " + " | ".join(str(v if v is not None else "-") for v in row.values())
                     + " |")
    return "\n".join(lines)


@click.command("bench")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@sweep_options
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Write throughput vs workers to a PNG (needs matplotlib: the install "
                   "line is above).")
def bench_command(path: Path, workers_text: str, batch_size: int, prefetch_text: str,
                  pin_memory: bool, size: int, seconds: float, as_json: bool,
                  plot: Path | None) -> None:
    """Run real DataLoader epochs over PATH (a packed dataset or an image folder).

    \b
    pack bench photos.wds --workers 0,1,2,4 --prefetch 2,4
    pack bench photos/ --seconds 10 --json
    pack bench photos.lmdb --plot sweep.png    # first: pip install 'packer-readers[plot]'
    """
    with user_errors():
        if plot is not None:
            from readers.diagnostics.plot import require_matplotlib

            require_matplotlib()
        _, results = run_sweep(path, workers_text, batch_size, prefetch_text, pin_memory,
                               size, seconds)
        if plot is not None:
            from readers.diagnostics.plot import plot_throughput

            plot_throughput(results, plot)
    click.echo(json.dumps(rows(results), indent=1) if as_json else table(results))


@click.command("tune")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@sweep_options
@click.option("--model-step-ms", type=click.FloatRange(0, min_open=True), default=None,
              help="Length of one training step: can the loader keep it fed?")
@click.option("--target-rate", type=click.FloatRange(0, min_open=True), default=None,
              help="Images/s the training needs.")
def tune_command(path: Path, workers_text: str, batch_size: int, prefetch_text: str,
                 pin_memory: bool, size: int, seconds: float, as_json: bool,
                 model_step_ms: float | None, target_rate: float | None) -> None:
    """Sweep like bench, then recommend DataLoader settings you can paste.

    \b
    pack tune photos.lmdb --model-step-ms 120
    pack tune photos.npy --workers 0,1,2 --target-rate 5000
    """
    with user_errors():
        from readers.diagnostics.sweep import sample_bytes
        from readers.diagnostics.tuning import (
            feed_verdict,
            queue_memory_bytes,
            recommend,
            warnings_for,
        )

        dataset, results = run_sweep(path, workers_text, batch_size, prefetch_text, pin_memory,
                                     size, seconds)
        chosen = recommend(results)
        per_sample = sample_bytes(dataset)
        import psutil

        advice: dict[str, Any] = {
            "dataloader_kwargs": chosen.config.kwargs(),
            "expected_images_per_s": round(chosen.images_per_s, 1),
            "queue_memory_estimate_mib": round(
                queue_memory_bytes(chosen.config, per_sample) / 2**20, 1),
            "measured_peak_memory_mib": round(chosen.peak_memory_bytes / 2**20, 1),
            "warnings": warnings_for(results, chosen, os.cpu_count() or 1,
                                     psutil.virtual_memory().available, per_sample),
            "feed": feed_verdict(chosen.images_per_s, batch_size, model_step_ms, target_rate),
        }
    if as_json:
        click.echo(json.dumps({"results": rows(results), "recommendation": advice}, indent=1))
        return
    click.echo(table(results))
    args = ", ".join(f"{k}={v!r}" for k, v in advice["dataloader_kwargs"].items())
    click.echo(f"\nrecommended: DataLoader(dataset, {args})")
    click.echo(f"expected {advice['expected_images_per_s']:,.0f} images/s; prefetch queue "
               f"~{advice['queue_memory_estimate_mib']} MiB (workers x prefetch x batch x "
               f"bytes per sample), measured peak {advice['measured_peak_memory_mib']} MiB")
    for note in advice["warnings"]:
        click.echo(f"warning: {note}")
    if advice["feed"]:
        click.echo(advice["feed"])


@click.command("profile")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--samples", type=click.IntRange(1), default=256, show_default=True)
@click.option("--size", type=click.IntRange(1), default=224, show_default=True)
@click.option("--workers", type=click.IntRange(0), default=2, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profile_command(path: Path, samples: int, size: int, workers: int, batch_size: int,
                    as_json: bool) -> None:
    """Time read, decode, resize and collate per sample, and name the bottleneck.

    \b
    pack profile photos.wds
    pack profile photos/ --samples 500 --json
    """
    with user_errors():
        from readers.diagnostics.profile import profile

        result = profile(path, samples, size, workers, batch_size)
    if as_json:
        click.echo(json.dumps({"per_sample_ms": {k: v * 1e3 for k, v in
                                                 result.per_sample_s.items()},
                               "shares": result.shares, "bottleneck": result.bottleneck(),
                               "loader_images_per_s": result.loader_images_per_s,
                               "loader_wait_ms": result.loader_wait_s * 1e3,
                               "cropped_jpeg_decode": crop_decode_status()}, indent=1))
        return
    click.echo(f"{result.samples} samples, one process:")
    for stage, seconds in result.per_sample_s.items():
        click.echo(f"  {stage:8s} {seconds * 1e3:8.3f} ms/sample  {result.shares[stage]:6.1%}")
    click.echo(f"with {workers} workers: {result.loader_images_per_s:,.0f} images/s, main "
               f"process waits {result.loader_wait_s * 1e3:.1f} ms per batch")
    click.echo(f"bottleneck: {result.bottleneck()}")
    click.echo(f"cropped JPEG decode (augment=): {crop_decode_status()}")
