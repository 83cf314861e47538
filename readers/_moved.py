"""Modules that moved into the concern folders answer to their old names for one release.

`install()` (readers/__init__.py calls it) puts `MovedFinder` first on `sys.meta_path`, so
no other finder (an editable install's, say) answers for an old name; for any other import
it costs one dict lookup. For an old name in `MOVED`, `import readers.resume` then gives the new
module itself (`readers.passes.resume`: the same objects, so `isinstance` and pickling see
one class) and warns once, at the first import, with a DeprecationWarning that names the
new path; later imports find the module in `sys.modules` and stay quiet.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from importlib import import_module
from types import FrameType, MappingProxyType, ModuleType

MOVED = MappingProxyType({
    "readers.cache": "readers.ram.chunk_cache",
    "readers.crop_decode": "readers.decoding.crop_decode",
    "readers.decode": "readers.decoding.decode",
    "readers.device_decode": "readers.decoding.device_decode",
    "readers.elastic": "readers.plan.elastic",
    "readers.epochs": "readers.passes.epochs",
    "readers.in_memory": "readers.ram.copies",
    "readers.mixing": "readers.plan.groups",
    "readers.monitor": "readers.diagnostics.monitor",
    "readers.resume": "readers.passes.resume",
    "readers.sampler": "readers.sampling.sampler",
    "readers.sharding": "readers.plan.chunks",
    "readers.split_owner": "readers.passes.split_owner",
    "readers.weighted": "readers.sampling.weighted",
    "readers.world": "readers.passes.world",
})


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new path, imported under its own name."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Give the module back its own spec: the import system set the old name's on it."""
        module.__spec__ = self._spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of MOVED, warning that they are deprecated."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} is deprecated: import from {new}", DeprecationWarning,
                      stacklevel=_importer_level())
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put one MovedFinder first on sys.meta_path (again after a reload: still one)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())


def moved_attribute(package: str, name: str) -> ModuleType:
    """`readers.resume` read as an attribute of `readers`: the moved module, warned."""
    if f"{package}.{name}" not in MOVED:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return import_module(f"{package}.{name}")


def _importer_level() -> int:
    """The warning's stacklevel that points at the import statement (or import_module
    call, or attribute read): past find_spec and this mechanism's own frames. The import
    system's frames do not count: `warnings` skips them itself."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and (_bootstrap(frame) or frame.f_code.co_filename
                                        in _OWN_FILES):
        level += not _bootstrap(frame)
        frame = frame.f_back
    return level


def _bootstrap(frame: FrameType) -> bool:
    """Whether a frame is the import system's (the frames warnings leaves out)."""
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


_OWN_FILES = frozenset({importlib.__file__, __file__,
                        os.path.join(os.path.dirname(__file__), "__init__.py")})
