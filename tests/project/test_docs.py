"""The docs site: it builds strictly, its links and README's resolve inside the repository,
and the benchmark commands it shows start from a clone (their code blocks run in
tests/project/test_docs_blocks.py, README's in tests/project/test_readme.py)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docblocks import REPO, code_blocks

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def relative_links(page: Path) -> list[str]:
    """The link targets of a page that point inside the repository, code blocks left out."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [target for target in LINK.findall(text) if not target.startswith(EXTERNAL)]


def anchors(page: Path) -> set[str]:
    """The heading ids mkdocs gives a page (toc's slugify: lower case, words joined by -)."""
    ids = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if heading := re.match(r"#{1,6} (.*)", line):
            words = re.sub(r"[^\w\s-]", "", heading.group(1).lower()).strip()
            ids.add(re.sub(r"[\s]+", "-", words))
    return ids


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        outside = not resolved.exists() or REPO not in (resolved, *resolved.parents)
        if outside or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    assert broken == [], f"{page.relative_to(REPO)}: links that do not resolve: {broken}"


def test_links_are_found_outside_code_only() -> None:
    readme = relative_links(REPO / "README.md")
    assert "docs/guides/packing.md" in readme and "docs/performance.md" in readme
    assert all(not link.startswith("`") for link in readme)


@pytest.mark.docs
@pytest.mark.timeout(600)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_click"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed: pip install -e '.[docs]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "pack convert" in cli and "--shard-size" in cli  # generated from the commands
    api = (tmp_path / "site" / "reference" / "readers" / "index.html").read_text(encoding="utf-8")
    assert "PackedDataset" in api and "ChunkSampler" in api


def benchmark_commands() -> list[list[str]]:
    """Each `python scripts/X.py ...` and `python -m devtools...` of docs/performance.md."""
    commands = []
    for block in code_blocks((REPO / "docs" / "performance.md").read_text(encoding="utf-8")):
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["python"] and len(words) > 1:
                commands.append(words[1:3] if words[1] == "-m" else words[1:2])
    return commands


@pytest.mark.docs
@pytest.mark.parametrize("command", benchmark_commands(), ids=" ".join)
def test_benchmark_commands_start_from_a_clone(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_the_benchmarks_need_nothing_outside_the_repository() -> None:
    for path in [*PAGES, *(REPO / "scripts").glob("*.py"), *(REPO / "devtools").rglob("*.py")]:
        assert "shared/bench" not in path.read_text(encoding="utf-8"), path


def test_pyproject_points_to_the_docs_for_the_layers() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert "DESIGN.md" not in text and "docs/architecture.md" in text
    assert "## Layout" in (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def layout_block() -> str:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]


def test_the_layout_names_every_module_and_no_module_that_is_gone() -> None:
    """The architecture page's layout is the map a maintainer reads first: each product
    module's name stands in it, and each name in it that looks like a module is one."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", layout_block()))
    modules = {path.stem if path.stem != "__init__" else path.parent.name
               for package in ("packer", "readers", "pack_cli")
               for path in (REPO / package).rglob("*.py")}
    assert sorted(modules - words) == []
    private = {word for word in words if word.startswith("_") and not word.startswith("__")}
    assert sorted(private - modules) == []
