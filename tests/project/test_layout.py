"""The shape of the code: what the wheel ships, and what importing a module costs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.wheel
def test_the_wheel_ships_no_harness(tmp_path: Path) -> None:
    """Fault injection, soaks, benchmarks and the demo live outside the packages."""
    tree = tmp_path / "tree"  # a copy: pip builds in the tree, and a stale build/ would leak
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(tree)], check=True, capture_output=True,
                   timeout=300)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    assert modules, "the wheel holds no module"
    tops = {n.split("/")[0] for n in modules}
    assert tops == {"packer", "readers", "pack_cli"}, tops
    shipped = {Path(n).stem for n in modules}
    for old in ("kills", "faults", "flips", "scale", "bench_report", "bench_memory",
                "pool_soak", "bench_support", "bench_baselines", "demo"):
        assert old not in shipped, f"{old} is harness and ships in the wheel"


def test_the_contract_names_the_formats_the_registry_has() -> None:
    from packer.core.layout import FORMAT_NAMES
    from packer.formats import FORMATS

    assert tuple(FORMATS) == FORMAT_NAMES


def test_importing_errors_is_light() -> None:
    """A DataLoader worker that only needs packer.errors pays for nothing else."""
    code = ("import sys, packer.errors; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('packer', 'readers', 'PIL', 'torch', 'simplejpeg', 'numpy', 'xxhash')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["['packer',", "'packer.errors']"]
    code = "import sys, packer; print('torch' in sys.modules, 'PIL' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.split() == ["False", "False"]


def project_imports() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at top level or lazily, from the AST."""
    import ast

    modules = {}
    for package in ("packer", "readers", "pack_cli"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_among_shipped_modules() -> None:
    graph = project_imports()
    assert len(graph) > 40
    # a package's __init__ re-exporting its own modules is not a cycle of the design
    for name in graph:
        graph[name] = {t for t in graph[name] if not name.startswith(f"{t}.")}
    assert cycles(graph) == []
