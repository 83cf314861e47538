"""The public surface: every error class a user can meet is defined in packer.errors and
exported from `packer` (the readers' from `readers` too), whatever module raises it;
control-flow exceptions inside a module are private."""

from __future__ import annotations

import inspect
import pkgutil
from importlib import import_module

import packer
import packer.errors
import readers


def error_classes_defined_outside_errors() -> list[str]:
    found = []
    for package in (packer, readers):
        for module_info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if module_info.name == "packer.errors":
                continue
            try:
                module = import_module(module_info.name)
            except ImportError:  # an optional extra that is not installed
                continue
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, Exception) and \
                        value.__module__ == module.__name__ and not name.startswith("_"):
                    found.append(f"{module.__name__}.{name}")
    return found


def test_no_error_class_lives_outside_packer_errors() -> None:
    assert error_classes_defined_outside_errors() == []


def test_every_public_error_is_exported() -> None:
    errors = {name for name, value in vars(packer.errors).items()
              if inspect.isclass(value) and issubclass(value, Exception)
              and value.__module__ == "packer.errors"
              and name not in ("RejectReason", "UnstorableRecord")}  # internal signals
    assert errors <= set(packer.__all__), errors - set(packer.__all__)
    assert readers.DecodeError is packer.DecodeError
    for name in errors:
        assert getattr(packer, name) is getattr(packer.errors, name)


def test_what_verify_returns_is_exported() -> None:
    from packer.dataset.verify import Report

    assert packer.Report is Report and "Report" in packer.__all__
    assert inspect.signature(packer.verify).return_annotation in (Report, "Report")
