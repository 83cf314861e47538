"""Memory at scale: a 1,000,000-sample index loads fast and small; workers stay flat.

The million-sample dataset is written directly (devtools.scale.index.make_tiny_dataset, 1x1
images, ~6 s) since encoding a million images would take far longer; its index and
table are what a conversion writes. Its index must load in under 1 s and 100 MB.

Three epochs over a million samples take about 2 minutes on 2 cores, too long for
CI, so the worker-USS check here runs on MID_SAMPLES (100,000) samples;
`python scripts/soak.py --million` runs it on the full million.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.scale.index import index_load_cost, make_tiny_dataset
from devtools.scale.workers import growth, worker_uss_by_epoch
from packer.api import verify

MILLION = 1_000_000
MID_SAMPLES = 100_000
MAX_LOAD_S = 1.0
MAX_LOAD_BYTES = 100 * 2**20
MAX_GROWTH = 0.05


@pytest.fixture(scope="module")
def million(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("scale") / "million", MILLION)


@pytest.fixture(scope="module")
def mid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_dataset(tmp_path_factory.mktemp("scale") / "mid", MID_SAMPLES)


def test_the_generated_dataset_is_a_valid_one(tmp_path: Path) -> None:
    folder = make_tiny_dataset(tmp_path / "small", 1000, classes=3)
    report = verify(folder)
    assert report.ok, report.problem
    assert report.num_samples == 1000


@pytest.mark.timeout(120)
def test_a_million_sample_index_loads_in_under_100_mb(million: Path) -> None:
    cost = index_load_cost(million)
    print(f"index of {MILLION} samples: {cost['seconds']:.3f} s, traced peak "
          f"{cost['peak_bytes'] / 2**20:.1f} MiB, RSS +{cost['rss_bytes'] / 2**20:.1f} MiB")
    assert cost["samples"] == MILLION
    assert cost["peak_bytes"] < MAX_LOAD_BYTES and cost["rss_bytes"] < MAX_LOAD_BYTES


@pytest.mark.perf
@pytest.mark.timeout(120)
def test_a_million_sample_index_loads_in_under_1_s(million: Path) -> None:
    assert index_load_cost(million)["seconds"] < MAX_LOAD_S


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_worker_memory_is_flat_over_3_epochs(mid: Path, kind: str) -> None:
    result = worker_uss_by_epoch(mid, epochs=3, kind=kind, timeout=280)
    uss = result["worker_uss"]
    assert isinstance(uss, list)
    print(f"{kind}: worker USS MiB by epoch {[[round(u / 2**20, 1) for u in e] for e in uss]},"
          f" seconds {result['seconds']}")
    assert result["samples_per_epoch"] == MID_SAMPLES
    assert all(len(epoch) == 2 for epoch in uss)
    assert growth(uss) < MAX_GROWTH
