"""Throughput against workers, one line per prefetch setting (matplotlib, optional)."""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

from packer.errors import MissingDependencyError, install_line
from readers.diagnostics.tuning import Measurement

MISSING = (f"--plot needs matplotlib, which is not installed; run `{install_line('plot')}` "
           "(or `pip install matplotlib`)")


def require_matplotlib() -> None:
    """Refuse --plot before a sweep of minutes, not after it, where it cannot be drawn."""
    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError(MISSING)


def plot_throughput(results: list[Measurement], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(MISSING) from exc
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in results:
        lines[f"prefetch {r.config.prefetch_factor or '-'}"].append(
            (r.config.num_workers, r.images_per_s))
    figure, axes = plt.subplots(figsize=(6, 4))
    for name, points in sorted(lines.items()):
        xs, ys = zip(*sorted(points), strict=True)
        axes.plot(xs, ys, marker="o", label=name)
    axes.set_xlabel("num_workers")
    axes.set_ylabel("images/s")
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
