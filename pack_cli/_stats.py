"""`pack stats`: per-channel mean/std, image sizes, classes, bytes and field values."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pack_cli._terminal import user_errors
from packer.dataset.stats import DatasetStats, Histogram, stats
from packer.dataset.stats_plot import plot_stats


@click.command("stats")
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None,
              metavar="OUT.png", help="Also draw the histograms into this PNG "
                                      "(needs matplotlib: the plot extra).")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Decoding threads (default: number of CPUs).")
@click.option("--pixel-samples", type=click.IntRange(1), default=None, metavar="N",
              help="Decode only N samples (those of smallest key hash, the same every run) "
                   "for mean and std; sizes, classes, bytes and fields stay exact over "
                   "all, read from headers (default: decode all).")
def stats_command(dst: Path, as_json: bool, plot: Path | None, workers: int | None,
                  pixel_samples: int | None) -> None:
    """Decode every sample of DST once and summarize it.

    mean and std are per channel (R, G, B) in 0-1 over every stored pixel (after any
    pack-time --resize/--size, before train-time crops): the arguments of
    torchvision's Normalize(mean, std); std is the population std over all pixels.
    Also: width, height and aspect-ratio histograms, samples per class and the
    imbalance (largest / smallest class), stored bytes per sample (mean, p50, p95)
    and the value counts of str and int fields.

    \b
    pack stats photos.wds
    pack stats photos.wds --json | jq .mean
    pack stats photos.wds --plot stats.png --workers 4
    pack stats photos.wds --pixel-samples 10000
    """
    with user_errors():
        facts = stats(dst, workers, pixel_samples)
        if plot is not None:
            plot_stats(facts, plot)
    click.echo(json.dumps(facts.to_json(), indent=1, ensure_ascii=False) if as_json
               else render(facts))


def render(facts: DatasetStats) -> str:
    """The text report: one fact a line, histograms as `edge-edge: count`."""
    lines = [f"{facts.path}: {facts.format}, {facts.num_samples} samples "
             f"({facts.seconds:.1f} s)",
             f"mean (stored pixels, 0-1): {_triple(facts.mean)}" + _over(facts),
             f"std  (stored pixels, 0-1): {_triple(facts.std)}",
             f"bytes per sample: mean {facts.bytes_mean:.0f}, p50 {facts.bytes_p50:.0f}, "
             f"p95 {facts.bytes_p95:.0f}"]
    for name, histogram in (("width", facts.width), ("height", facts.height),
                            ("aspect (w/h)", facts.aspect)):
        lines.append(f"{name}: min {histogram.min:g}, max {histogram.max:g}, "
                     f"mean {histogram.mean:.3g}")
        lines += _bins(histogram)
    imbalance = "n/a (a class is empty)" if facts.imbalance is None else f"{facts.imbalance:.3g}"
    lines.append(f"classes (imbalance {imbalance}):")
    lines += [f"  {name}: {count}" for name, count in facts.classes.items()]
    for name, values in facts.field_values.items():
        lines.append(f"field {name}:")
        lines += [f"  {_short(value)}: {count}" for value, count in values.items()]
    lines += [f"field {name}: not categorical (too many distinct values)"
              for name in facts.not_categorical]
    return "\n".join(lines)


def _over(facts: DatasetStats) -> str:
    if facts.num_pixel_samples == facts.num_samples:
        return ""
    return f" (over {facts.num_pixel_samples} samples)"


def _bins(histogram: Histogram) -> list[str]:
    edges = histogram.edges
    return [f"  {edges[k]:.4g}-{edges[k + 1]:.4g}: {count}"
            for k, count in enumerate(histogram.counts) if count]


def _short(value: str, limit: int = 60) -> str:
    """A value as repr, cut to `limit` characters (a caption may run to thousands)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _triple(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.4f}" for v in values)
