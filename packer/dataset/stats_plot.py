"""`pack stats --plot OUT.png`: the size, aspect and class histograms (matplotlib, optional)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from packer.dataset.stats import DatasetStats, Histogram
from packer.errors import MissingDependencyError, install_line

MISSING = (f"--plot needs matplotlib, which is not installed; run `{install_line('plot')}` "
           "(or `pip install matplotlib`)")


def plot_stats(facts: DatasetStats, path: Path) -> None:
    """Draw width, height, aspect ratio and class counts into one PNG at `path`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(MISSING) from exc
    figure, axes = plt.subplots(2, 2, figsize=(9, 6))
    for ax, (title, histogram) in zip(axes.flat, (("width (px)", facts.width),
                                                  ("height (px)", facts.height),
                                                  ("aspect ratio (w / h)", facts.aspect)),
                                      strict=False):
        _bars(ax, title, histogram)
    classes = axes.flat[3]
    names = list(facts.classes)
    classes.bar(range(len(names)), list(facts.classes.values()))
    classes.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    classes.set_title(f"samples per class (imbalance {_ratio(facts.imbalance)})")
    figure.suptitle(f"{facts.path}: {facts.num_samples} samples, mean "
                    f"{_triple(facts.mean)}, std {_triple(facts.std)}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _bars(ax: Any, title: str, histogram: Histogram) -> None:
    edges = histogram.edges
    if edges:
        widths = [b - a for a, b in itertools.pairwise(edges)]
        ax.bar(edges[:-1], histogram.counts, width=widths, align="edge", edgecolor="white")
    ax.set_title(title)
    ax.set_ylabel("samples")


def _triple(values: tuple[float, float, float]) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
