"""The distribution name: ours on the package index, and every install line uses it.

`packer` on the package index is an unrelated package, so `pip install 'packer[ray]'`
would install the wrong thing. The distribution is packer.errors.DISTRIBUTION (the
import packages stay `packer` and `readers`, the command `pack`); every
`pip install 'NAME[extra]'` the README, the library or the scripts show must name it
and an extra that pyproject.toml defines.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer.errors import DISTRIBUTION, install_line

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# `pip install 'name[extra]'` or "name[extra]", as a user would paste it.
INSTALL = re.compile(
    r"""pip install (?:-e )?['"]?(?P<name>[A-Za-z0-9_.-]+)\[(?P<extras>[^\]]+)\]""")


def texts() -> dict[str, str]:
    """README, the docs, library sources and scripts: wherever an install line may be shown."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "scripts").iterdir()),
             *sorted((ROOT / "packer").rglob("*.py")), *sorted((ROOT / "readers").rglob("*.py"))]
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in paths if p.is_file()}


def test_the_distribution_is_not_the_unrelated_packer() -> None:
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    assert DISTRIBUTION.lower() != "packer"
    assert PYPROJECT["project"]["scripts"] == {"pack": "pack_cli:run"}


def test_the_installed_distribution_is_ours_and_pack_version_names_it() -> None:
    version = importlib.metadata.version(DISTRIBUTION)
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert version in result.output


def test_every_install_line_names_our_distribution_and_a_real_extra() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    found = []
    for where, text in texts().items():
        for match in INSTALL.finditer(text):
            if match.group("name") in (".", "moto") or match.group("name").startswith(
                    "nvidia-nvimgcodec"):  # from a clone; a dependency's own; a GPU decoder
                continue
            found.append(where)
            assert match.group("name") == DISTRIBUTION, (where, match.group(0))
            assert set(match.group("extras").split(",")) <= extras, (where, match.group(0))
    assert "README.md" in found and "docs/getting-started.md" in found and len(found) >= 4


def test_install_line() -> None:
    assert install_line("s3") == f"pip install '{DISTRIBUTION}[s3]'"
