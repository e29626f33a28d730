"""The public surface of tidegate.edi is explicit, sorted and complete."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import re

import pytest

import tidegate.edi
from tidegate.edi import errors
from tidegate.errors import EdifactError

MODULES = sorted(
    f"tidegate.edi.{info.name}" for info in pkgutil.iter_modules(tidegate.edi.__path__)
)


def isort_key(name: str) -> tuple[int, str]:
    """RUF022's order: CONSTANTS, then Classes, then functions."""
    if re.fullmatch(r"[A-Z0-9_]+", name):
        return 0, name
    return (1, name) if name[0].isupper() else (2, name)


@pytest.mark.parametrize("name", ["tidegate.edi", *MODULES])
def test_all_is_sorted_and_resolves(name: str) -> None:
    """Every module declares a sorted __all__ whose names exist."""
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported, key=isort_key)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol}"


def test_package_exports_the_public_names_of_its_modules() -> None:
    """What the modules export for users is reachable from tidegate.edi."""
    internal = {"tidegate.edi.charsets", "tidegate.edi.synthetic"}
    package = set(tidegate.edi.__all__)
    for name in MODULES:
        if name in internal:
            continue
        module = importlib.import_module(name)
        missing = {
            symbol
            for symbol in module.__all__
            if symbol not in package and not symbol.isupper() and symbol not in _MODULE_ONLY
        }
        assert not missing, f"{name}: {sorted(missing)}"


#: Public but deliberately reached through their module (classes of the routing
#: table, helpers of one module).
_MODULE_ONLY = {
    "canonical_separators",
    "escape",
    "parse_una",
    "split_segment",
    "location_findings",
    "container_refs",
    "is_locode",
    "is_valid_container",
    "ConsignmentSplitter",
    "MessageConsumer",
    "Element",
    "LOCODE_QUALIFIERS",
}


def test_error_tree_is_rooted_in_tidegate_errors() -> None:
    """Every EDIFACT error derives from the project's EdifactError, with a code."""
    for symbol in errors.__all__:
        error = getattr(errors, symbol)
        assert issubclass(error, EdifactError)
        if error is not EdifactError:
            assert isinstance(error.code, str)


@pytest.mark.parametrize("name", ["tidegate.edi", *MODULES])
def test_docstring_examples_run(name: str) -> None:
    """The ``>>>`` examples in the docstrings are true."""
    failed, _ = doctest.testmod(importlib.import_module(name))
    assert failed == 0
