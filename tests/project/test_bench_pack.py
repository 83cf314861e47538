"""scripts/bench_pack.py's suite on a tiny folder: ours, ShardWriter, tar and the peers'
writers (where installed) each time once, the table names them, a missing peer is a note."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from devtools.bench import peers
from devtools.bench.pack_report import cases_for, run_suite, speed_table
from packer.testing import make_sample_folder


@pytest.mark.timeout(300)
def test_pack_suite_times_ours_and_every_installed_writer(tmp_path: Path) -> None:
    src = make_sample_folder(tmp_path / "photos", count=24, classes=2, max_side=160)
    cases = cases_for(["wds", "lmdb"])
    results = run_suite(src, tmp_path / "work", 24, cases, 1, lambda line: None)
    installed = [p for p, module in peers.PEERS.items() if importlib.util.find_spec(module)]
    assert set(results.runs) == {case.name for case in cases} | {"shardwriter", "tar",
                                                                 *installed}
    assert all(rate > 0 for rates in results.runs.values() for rate in rates)
    table = speed_table(results, cases, 2)
    assert "| wds pass-through --check none |" in table
    for peer in peers.PEERS:
        assert (f"{peers.NAMES[peer]} skipped" in table) is (peer not in installed)
        assert (f"x {peer}" in table) is (peer in installed)
    assert not (tmp_path / "work" / "peer-litdata").exists()  # each write is removed
