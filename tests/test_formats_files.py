"""packer.formats.FILES, what a DST check reads without importing every format, is
each format module's own FILES; a wds conversion imports no other format's library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from packer import formats
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
