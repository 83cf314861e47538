"""scripts/bench_read.py end to end on a tiny folder: packs, times every case, tabulates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from devtools.bench.read import Settings, build_cases, markdown, pack_all, run_cases
from packer.testing import make_sample_folder


@pytest.mark.timeout(300)
def test_bench_runs_every_case_and_prints_a_table(tmp_path: Path) -> None:
    src = make_sample_folder(tmp_path / "photos", count=40, classes=2, max_side=160)
    settings = Settings(src=src, work=tmp_path / "work", formats=("wds", "npy"), runs=1,
                        count=30, size=(32, 32), batch_size=8, num_workers=0, epochs=1)
    lines: list[str] = []
    used, packed = pack_all(settings, lines.append)
    assert set(packed) == {"wds", "npy"} and all((p / "index.json").exists()
                                                  for p in packed.values())
    cases = build_cases(settings, used, packed)
    run_cases(cases, settings, lines.append)
    table = markdown(cases, settings)
    assert all(len(case.rates) == 1 and case.median > 0 for case in cases)
    for reader in ("PIL ImageFolder (a)", "stock webdataset (b)", "naive np.load memmap (c)",
                   "memcpy, 1 thread (d)", "PackedIterableDataset", "readers decode, 1 thread",
                   "PIL ImageFolder + crop", "readers crop decode, 1 thread",
                   "RandomResizedCrop 32x32", "CenterCrop 32x32"):
        assert reader in table
    # a second call reuses the packed copies instead of packing again
    lines.clear()
    pack_all(replace(settings, runs=2), lines.append)
    assert not any(line.startswith("packing") for line in lines)
