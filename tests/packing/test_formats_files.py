"""packer.formats.FILES, what a DST check reads without importing every format, is
each format module's own FILES; a wds conversion imports no other format's library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from packer import ConvertOptions, EncodeOptions, convert, formats
from packer.testing import make_sample_folder
from tests.helpers import FORMATS, png_bytes, random_image


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_registry_names_each_formats_files(fmt: str) -> None:
    assert formats.FILES[fmt] == formats.load(fmt).FILES


def test_a_wds_conversion_imports_no_other_formats_library(tmp_path: Path) -> None:
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "0.png").write_bytes(png_bytes(random_image(8, 8, seed=0)))
    (tmp_path / "out").mkdir()  # an existing DST: its files are checked against ours
    (tmp_path / "out" / "rejects.jsonl").write_text("")
    code = ("import sys; from pack_cli import run\n"
            "try: run(['convert', sys.argv[1], sys.argv[2], '--to', 'wds', '-q', '--overwrite'])\n"
            "except SystemExit as exc: assert not exc.code, exc.code\n"
            "print(sorted(m for m in ('h5py', 'lmdb') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "src"),
                           str(tmp_path / "out")], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_says_its_files_beside_the_shards(fmt: str, tmp_path: Path) -> None:
    """side_files (what our readers need), kept_files (for other tools) and their check,
    asked of the format module, never probed for by attribute name."""
    src = make_sample_folder(tmp_path / "src", count=4, classes=2, min_side=8, max_side=10)
    options = EncodeOptions(size=(8, 8)) if fmt == "npy" else None
    index = convert(src, tmp_path / fmt, fmt, options, ConvertOptions(workers=0))
    module = formats.load(fmt)
    side = module.side_files(index)
    kept = module.kept_files(index)
    assert side == (("labels.npy",) if fmt == "npy" else ())
    assert kept == ((f"{fmt}.wids.json",) if fmt == "wds" else ()), kept  # named after DST
    assert all((tmp_path / fmt / name).is_file() for name in (*side, *kept))
    checked = module.check_kept_files(tmp_path / fmt, index)
    assert checked == (("wids index",) if fmt == "wds" else ())
