"""The public surface: the words a user of the README needs, at the top of `packer` and
`readers`; every error class a user can meet defined in packer.errors (their base,
PackError, at the top too), whatever module raises it; control-flow exceptions inside a
module private; what the operations return exported beside them."""

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


SURFACE_BOUND = 33  # readers.__all__ and packer.__all__ together


def test_every_public_error_is_a_pack_error_in_packer_errors() -> None:
    errors = {name: value for name, value in vars(packer.errors).items()
              if inspect.isclass(value) and issubclass(value, Exception)
              and value.__module__ == "packer.errors"
              and name not in ("RejectReason", "UnstorableRecord")}  # internal signals
    assert "DecodeError" in errors and "SourceError" in errors
    assert all(issubclass(value, packer.PackError) for value in errors.values())
    assert [name for name in packer.__all__ if name in errors] == ["PackError"]


def test_the_surface_is_the_words_a_user_needs() -> None:
    names = [*readers.__all__, *packer.__all__]
    assert len(names) <= SURFACE_BOUND, sorted(names)
    assert len(set(names)) == len(names), "a name exported twice"
    for package in (packer, readers):
        for name in package.__all__:
            assert getattr(package, name) is not None


def test_what_the_operations_return_is_exported() -> None:
    for operation, returned in (("convert", "Index"), ("verify", "Report"),
                                ("describe", "Description"), ("stats", "DatasetStats"),
                                ("append", "AppendResult"), ("split", "SplitReport")):
        annotation = inspect.signature(getattr(packer, operation)).return_annotation
        assert returned in packer.__all__
        assert annotation in (getattr(packer, returned), returned), (operation, annotation)


def test_what_verify_returns_is_exported() -> None:
    from packer.dataset.verify import Report

    assert packer.Report is Report and "Report" in packer.__all__
    assert inspect.signature(packer.verify).return_annotation in (Report, "Report")
