"""A first round trip through every format (the full contract suite lives in test_contract)."""

from pathlib import Path

import pytest

from packer import convert, formats
from packer.convert import ConvertOptions
from packer.index import open_dataset
from packer.sample import make_sample_folder


@pytest.mark.parametrize("fmt", ["wds", "lmdb", "hdf5", "npy"])
def test_round_trip_reads_every_sample(tmp_path: Path, fmt: str) -> None:
    src = make_sample_folder(tmp_path / "src", count=20, classes=2)
    index = convert(src, tmp_path / fmt, fmt, run=ConvertOptions(workers=0))
    assert index.num_samples == 20
    loaded, table = open_dataset(tmp_path / fmt)
    reader = formats.load(fmt).open_reader(tmp_path / fmt, loaded, table)
    data = list(reader.read_range(0, 20))
    assert [reader.read(i) for i in range(20)] == data
    if fmt != "npy":
        assert data[3] == (src / f"{table.key(3)}.jpg").read_bytes()
