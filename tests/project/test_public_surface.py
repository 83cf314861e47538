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

MOVED = ("packer.upload", "readers.sharding", "readers.mixing", "readers.in_memory",
         "readers.decode", "readers.crop_decode", "readers.device_decode")
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


@pytest.mark.parametrize(("old", "new"), [("readers.sharding", "readers.plan.chunks"),
                                          ("readers.mixing", "readers.plan.groups"),
                                          ("readers.in_memory", "readers.ram.copies"),
                                          ("readers.decode", "readers.decoding.decode"),
                                          ("readers.crop_decode", "readers.decoding.crop_decode"),
                                          ("readers.device_decode",
                                           "readers.decoding.device_decode")])
def test_a_moved_module_answers_to_its_old_name_with_a_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import from {new}"):
        module = import_module(old)
    assert module is import_module(new)
