"""`pack bench`, `pack tune`, `pack profile` on a tiny real dataset (structure, not speed)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert
from packer.errors import install_line
from packer.testing import make_sample_folder

real_find_spec = importlib.util.find_spec


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("loader-cli")
    src = make_sample_folder(root / "src", count=48, classes=3, max_side=160)
    convert(src, root / "ds", "lmdb", run=ConvertOptions(workers=0))
    return src, root / "ds"


def invoke(*args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_bench_sweeps_every_configuration(packed: tuple[Path, Path]) -> None:
    rows = invoke("bench", str(packed[1]), "--workers", "0,1", "--prefetch", "2,4",
                  "--batch-size", "8", "--size", "32", "--seconds", "0.5")
    assert [(r["num_workers"], r["prefetch_factor"]) for r in rows] == [(0, None), (1, 2), (1, 4)]
    for row in rows:
        assert row["images_per_s"] > 0 and row["batches_per_s"] > 0
        assert 0 <= row["median_wait_ms"] <= row["p95_wait_ms"]
        assert row["peak_memory_mib"] > 10  # at least this interpreter with torch loaded


def test_bench_reads_a_plain_image_folder(packed: tuple[Path, Path]) -> None:
    rows = invoke("bench", str(packed[0]), "--workers", "0", "--batch-size", "8",
                  "--size", "32", "--seconds", "0.5")
    assert len(rows) == 1 and rows[0]["images_per_s"] > 0


def test_tune_recommends_a_measured_configuration(packed: tuple[Path, Path]) -> None:
    out = invoke("tune", str(packed[1]), "--workers", "0,1", "--batch-size", "8", "--size",
                 "32", "--seconds", "0.5", "--target-rate", "1e9")
    advice = out["recommendation"]
    measured = {r["num_workers"]: r["images_per_s"] for r in out["results"]}
    kwargs = advice["dataloader_kwargs"]
    assert advice["expected_images_per_s"] == pytest.approx(measured[kwargs["num_workers"]],
                                                            rel=0.01)
    assert advice["expected_images_per_s"] >= 0.95 * max(measured.values())
    workers = kwargs["num_workers"]
    in_flight = workers * kwargs.get("prefetch_factor", 0) if workers else 1
    expected_mib = in_flight * 8 * 3 * 32 * 32 / 2**20
    assert advice["queue_memory_estimate_mib"] == pytest.approx(expected_mib, abs=0.1)
    assert advice["feed"].startswith("falls short")


def test_profile_names_a_bottleneck(packed: tuple[Path, Path]) -> None:
    out = invoke("profile", str(packed[1]), "--samples", "32", "--size", "32", "--workers", "1",
                 "--batch-size", "8")
    assert set(out["per_sample_ms"]) == {"read", "decode", "resize", "collate"}
    assert sum(out["shares"].values()) == pytest.approx(1.0)
    stage = max(out["shares"], key=out["shares"].get)
    assert out["bottleneck"].startswith(f"{stage}: ")
    assert out["loader_images_per_s"] > 0


def test_bench_rejects_a_bad_worker_list(packed: tuple[Path, Path]) -> None:
    result = CliRunner().invoke(main, ["bench", str(packed[1]), "--workers", "a,b"])
    assert result.exit_code == 2
    assert "expected a list" in result.output


def test_bench_plot_without_matplotlib_says_how_to_install_it_before_measuring(
        packed: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import readers.diagnostics.sweep

    def no_sweep(*args: object, **kwargs: object) -> None:
        raise AssertionError("the sweep ran although its plot cannot be drawn")

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real_find_spec(name))
    monkeypatch.setattr(readers.diagnostics.sweep, "sweep", no_sweep)
    result = CliRunner().invoke(main, ["bench", str(packed[1]), "--plot",
                                       str(tmp_path / "sweep.png")])
    assert result.exit_code == 1, result.output
    assert result.stderr == ("error: --plot needs matplotlib, which is not installed; run "
                             f"`{install_line('plot')}` (or `pip install matplotlib`)\n")
    assert not (tmp_path / "sweep.png").exists()


def test_bench_help_shows_the_plot_install_line() -> None:
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    assert install_line("plot") in " ".join(result.output.split())
