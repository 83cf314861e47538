"""Invariant 14: the product stands on the public API of its dependencies. No private torch
name (`torch._C`, `_`-prefixed storage methods, torch's `_utils`), no patch of
multiprocessing's pickler, no attribute set on a framework's objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [path for package in ("packer", "readers", "pack_cli")
           for path in sorted((ROOT / package).rglob("*.py"))]
OURS = ("packer", "readers", "pack_cli")
FRAMEWORKS = ("accelerate", "transformers", "lightning", "pytorch_lightning")


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for a chain of attributes on a name; '' for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


def private_uses(path: Path) -> list[str]:
    """`file:line name` for each private name of torch or multiprocessing used in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in ("torch", "multiprocessing"):
                names += [node.module, *(alias.name for alias in node.names)]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names if alias.name.startswith("torch")]
        for name in names:
            if any(part.startswith("_") and not part.startswith("__")
                   for part in name.split(".")) and _from_torch(node, name):
                found.append(f"{_shown(path)}:{getattr(node, 'lineno', 0)} {name}")
    return found


def _from_torch(node: ast.AST, name: str) -> bool:
    """Whether the private `name` belongs to torch or multiprocessing (not to our own
    objects): an import from them, or an attribute on a chain that starts there."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    root = _dotted(node).split(".")[0]
    return root in ("torch", "ForkingPickler", "multiprocessing") or \
        name in ("_storage_Use_Count", "_new_shared", "_share_fd_cpu_", "_cdata",
                 "_new_shared_fd_cpu", "_extra_reducers", "_typed_storage")


def framework_assignments(path: Path) -> list[str]:
    """`file:line target` for each assignment to an attribute of a framework module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{_shown(path)}:{node.lineno} {_dotted(target)}"
            for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if _dotted(target).split(".")[0] in FRAMEWORKS]


def test_the_product_uses_no_private_name_of_torch_or_multiprocessing() -> None:
    found = [use for path in PRODUCT for use in private_uses(path)]
    assert not found, "\n".join(found)


def test_the_product_sets_no_attribute_of_a_framework() -> None:
    found = [use for path in PRODUCT for use in framework_assignments(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("import torch\nn = torch._C._storage_Use_Count(1)\n", 2),
    ("from multiprocessing.reduction import ForkingPickler\nForkingPickler._extra_reducers\n", 1),
    ("from torch._utils import _rebuild_tensor\n", 2),
    ("def f(storage):\n    return storage._share_fd_cpu_()\n", 1),
    ("import torch\nx = torch.frombuffer(b'', dtype=torch.uint8)\nself._private = 1\n", 0),
])
def test_the_check_finds_private_names(tmp_path: Path, source: str, expected: int) -> None:
    path = tmp_path / "module.py"
    path.write_text(source)
    assert len(private_uses(path)) == expected, private_uses(path)


def test_the_check_finds_framework_assignments(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text("import accelerate\naccelerate.data_loader.skip = 0\nx = accelerate\n")
    assert len(framework_assignments(path)) == 1
