"""The peers suite of scripts/bench_read.py and the peers' pack baselines, on tiny data:
every case times, a peer that is missing is skipped with a note, the scripts' documented
command lines run (--quick)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from devtools.bench import peers
from devtools.bench.read import Settings, build_cases, markdown, pack_all, run_cases
from packer.testing import make_sample_folder

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))  # the scripts' own parse + main

import bench_read  # noqa: E402

HAVE = {peer: importlib.util.find_spec(module) is not None
        for peer, module in peers.PEERS.items()}


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sample_folder(tmp_path_factory.mktemp("peers") / "photos", count=40,
                              classes=2, max_side=160)


def tiny(src: Path, work: Path, workers: int) -> Settings:
    return Settings(src=src, work=work, formats=("wds", "lmdb", "npy"), runs=1, count=30,
                    size=(32, 32), batch_size=8, num_workers=workers, epochs=1,
                    warmup_epochs=1, raw_epochs=2, suite="peers")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_peers_suite_times_every_case(photos: Path, tmp_path: Path, workers: int) -> None:
    settings = tiny(photos, tmp_path / "work", workers)
    used, packed = pack_all(settings, lambda line: None)
    assert set(packed) == {"wds", "lmdb", "npy"}
    cases = build_cases(settings, used, packed)
    run_cases(cases, settings, lambda line: None)
    assert all(len(case.rates) == 1 and case.median > 0 for case in cases)
    ids = {case.id for case in cases}
    assert {"pil", "wds-stock", "wds-stock-raw", "memcpy", "wds-PackedIterableDataset-collate-raw",
            "lmdb-PackedDataset-collate-raw", "npy-PackedDataset-collate-rgb8",
            "lmdb-plain-raw", "lmdb-fields-raw"} <= ids
    for peer, have in HAVE.items():
        assert ({f"{peer}-raw", f"{peer}-rgb8"} <= ids) is have
    table = markdown(cases, settings)
    assert "litdata-raw >= 3x" in table or not HAVE["litdata"]
    assert "wds-stock-raw >= 3.5x" in table and "memcpy >= 0.6x" in table
    for peer, have in HAVE.items():
        assert (f"{peers.NAMES[peer]} skipped" in table) is not have


def test_a_missing_peer_is_skipped_with_a_note(photos: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(peers.PEERS, "litdata", "no_such_module_litdata")
    monkeypatch.setitem(peers.PEERS, "mosaic", "no_such_module_streaming")
    settings = tiny(photos, tmp_path / "work", 0)
    used, packed = pack_all(settings, lambda line: None)
    cases = build_cases(settings, used, packed)
    assert not {case.fmt for case in cases} & {"litdata", "mosaic"}
    assert peers.missing("litdata") == ("litdata skipped: not installed "
                                        "(pip install litdata)")
    run_cases(cases[:1], settings, lambda line: None)
    table = markdown(cases[:1], settings)
    assert "mosaicml-streaming skipped: not installed" in table


@pytest.mark.skipif(not all(HAVE.values()), reason="litdata or mosaicml-streaming missing")
def test_peers_write_the_same_bytes_and_labels(photos: Path, tmp_path: Path) -> None:
    expected = sorted((Path(path).read_bytes(), label) for path, label in peers.items_of(photos))
    for peer, loader in (("litdata", peers.litdata_loader), ("mosaic", peers.mosaic_loader)):
        path = peers.written(peer, photos, tmp_path / peer)
        got = [(bytes(data), int(label)) for batch in loader(path, None, 8, 0)
               for data, label in zip(*batch, strict=True)]
        assert sorted(got) == expected
        # written once: a second call finds the copy complete
        stamp = (path / ".complete").stat().st_mtime_ns
        peers.written(peer, photos, tmp_path / peer)
        assert (path / ".complete").stat().st_mtime_ns == stamp


@pytest.mark.timeout(300)
def test_bench_read_documented_command_runs(photos: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`scripts/bench_read.py SRC --suite peers --quick` as docs/performance.md has it,
    on 30 photos."""
    bench_read.main([str(photos), "--work", str(tmp_path / "w"), "--suite", "peers",
                     "--quick", "--count", "30", "--epochs", "2"])
    out = capsys.readouterr().out
    assert "| PackedDataset + readers.collate | lmdb | raw |" in out
    assert "1 run(s), 2 timed epochs (6 for raw and npy) after 1 warm-up each" in out
