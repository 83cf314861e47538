"""A script that keeps datasets in module-level variables exits without noise, in every format.

At interpreter exit module globals are torn down in no particular order; a finalizer
that looks up a module global then (`os.close`) prints "Exception ignored in ..." on
stderr. Each case runs a real interpreter, so the tear-down is the real one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import pack_every_format

SCRIPT = textwrap.dedent("""
    import sys
    from readers import PackedDataset, PackedIterableDataset

    ds = PackedDataset(sys.argv[1])
    it = PackedIterableDataset(sys.argv[1])
    sample = ds[0]
    first = next(iter(it))
    rest = iter(it)
    second = next(rest)  # a generator left suspended at exit
""")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return pack_every_format(tmp_path_factory.mktemp("exit"), 24, (16, 16), 24, 48)


def test_module_level_datasets_exit_silently(packed: dict[str, Path], fmt: str,
                                             tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(packed[fmt])], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
