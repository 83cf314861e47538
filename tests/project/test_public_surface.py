"""The public surface: every error class a user can meet is defined in packer.errors and
exported from `packer` (the readers' from `readers` too), whatever module raises it; a
module that moved answers to its old name for a release, with a warning."""

from __future__ import annotations

import inspect
import pkgutil
import sys
from importlib import import_module

import pytest

import packer
import packer.errors
import readers
from readers._moved import MOVED as MOVED_READERS

MOVED = ("packer.upload",)  # the readers' old names are aliases (readers._moved), not files
# Control flow inside one module, never raised to a caller: a reject's reason, and the
# tar header walk's "let tarfile read this one".
INTERNAL_SIGNALS = {"packer.source.coco_images.Missing", "packer.source.tarheaders.Unusual"}


def error_classes_defined_outside_errors() -> list[str]:
    found = []
    for package in (packer, readers):
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module_info.name in ("packer.errors", *MOVED):
                continue
            try:
                module = import_module(module_info.name)
            except ImportError:  # an optional extra that is not installed
                continue
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, Exception) and \
                        value.__module__ == module.__name__:
                    found.append(f"{module.__name__}.{name}")
    return found


def test_no_error_class_lives_outside_packer_errors() -> None:
    assert set(error_classes_defined_outside_errors()) == INTERNAL_SIGNALS


def test_every_public_error_is_exported() -> None:
    errors = {name for name, value in vars(packer.errors).items()
              if inspect.isclass(value) and issubclass(value, Exception)
              and value.__module__ == "packer.errors"
              and name not in ("RejectReason", "UnstorableRecord")}  # internal signals
    assert errors <= set(packer.__all__), errors - set(packer.__all__)
    assert readers.DecodeError is packer.DecodeError
    for name in errors:
        assert getattr(packer, name) is getattr(packer.errors, name)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_READERS.items()))
def test_a_moved_module_answers_to_its_old_name_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import from {new}"):
        module = import_module(old)
    assert module is import_module(new)
    assert module.__spec__ is not None and module.__spec__.name == new  # its own spec kept


def test_an_old_name_warns_once_at_the_import_that_uses_it() -> None:
    sys.modules.pop("readers.resume", None)
    with pytest.warns(DeprecationWarning) as caught:
        import readers.resume
        from readers.resume import loop_state  # in sys.modules now: quiet
    assert [w.filename for w in caught] == [__file__]
    assert loop_state is readers.loop_state
    assert readers.resume is import_module("readers.passes.resume")


def test_an_old_name_read_as_an_attribute_warns_too() -> None:
    sys.modules.pop("readers.sampler", None)
    vars(readers).pop("sampler", None)  # an import of readers.sampler set the attribute
    with pytest.warns(DeprecationWarning, match="readers.sampler is deprecated"):
        sampler = readers.sampler
    assert sampler.ChunkSampler is readers.ChunkSampler
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        readers.nothing  # noqa: B018


def test_the_packages_hold_no_old_name() -> None:
    """An old name is only an alias: no file of that name is left to shadow it."""
    on_disk = {info.name for info in pkgutil.walk_packages(readers.__path__, "readers.")}
    assert not on_disk & set(MOVED_READERS)
    assert set(MOVED_READERS.values()) <= on_disk

