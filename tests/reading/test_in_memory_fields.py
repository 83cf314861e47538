"""in_memory=True with per-sample fields: the copy in RAM holds the field files too
(fields.npy, npy's fields/ folder), so every reader gives what the disk gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from packer.errors import CorruptDatasetError
from readers import PackedDataset, PackedIterableDataset, collate
from tests.field_array_support import pack_arrays
from tests.field_support import same_bits
from tests.helpers import FORMATS, pack_with_fields


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private RAM folder for the test."""
    monkeypatch.setenv("PACKER_RAM_DIR", str(tmp_path / "ram"))
    return tmp_path / "ram"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_ram_copy_gives_the_fields_the_disk_gives(tmp_path: Path, root: Path,
                                                     fmt: str) -> None:
    for dst in (pack_with_fields(tmp_path / "plain", fmt)[0],
                pack_arrays(tmp_path / "arrays", fmt)):
        disk = PackedDataset(dst, fields="all", with_keys=True)
        ram = PackedDataset(dst, fields="all", with_keys=True, in_memory=True)
        assert ram.path.parent == root
        everything = list(range(len(disk)))
        assert same_bits(collate(ram.__getitems__(everything)),
                         collate(disk.__getitems__(everything)))
        assert all(same_bits(ram[i], disk[i]) for i in everything)
        streamed = DataLoader(PackedIterableDataset(dst, fields="all", with_keys=True,
                                                    shuffle=False, in_memory=True),
                              batch_size=None)
        assert same_bits(list(streamed), [disk[i] for i in everything])


@pytest.mark.parametrize("missing", ["fields.npy", "fields/caption.data.npy"])
def test_a_missing_field_file_is_named_before_the_copy(tmp_path: Path, root: Path,
                                                      missing: str) -> None:
    dst = pack_with_fields(tmp_path, "npy")[0]
    (dst / missing).unlink()
    with pytest.raises(CorruptDatasetError, match=f"{re.escape(str(dst / missing))}: missing "
                                                  "from the dataset; restore it or reconvert"):
        PackedDataset(dst, fields="all", in_memory=True)
    assert not root.exists() or not any(root.iterdir())  # nothing half-copied left
