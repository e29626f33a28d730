"""The public surface of tidegate.intake is explicit, sorted and rooted in the error tree."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import tidegate.intake
from tidegate.errors import TidegateError
from tidegate.intake import errors

MODULES = sorted(
    f"tidegate.intake.{info.name}" for info in pkgutil.iter_modules(tidegate.intake.__path__)
)


def isort_key(name: str) -> tuple[int, str]:
    """RUF022's order: CONSTANTS, then Classes, then functions."""
    if re.fullmatch(r"[A-Z0-9_]+", name):
        return 0, name
    return (1, name) if name[0].isupper() else (2, name)


@pytest.mark.parametrize("name", ["tidegate.intake", *MODULES])
def test_all_is_sorted_and_resolves(name: str) -> None:
    """Every module declares a sorted __all__ whose names exist (the app's lazily)."""
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported, key=isort_key)
    for symbol in exported:
        assert getattr(module, symbol) is not None, f"{name}.{symbol}"


def test_every_intake_error_is_a_tidegate_error_with_a_code() -> None:
    """One tree: a caller catching TidegateError catches every refusal."""
    for symbol in errors.__all__:
        error = getattr(errors, symbol)
        assert inspect.isclass(error)
        assert issubclass(error, TidegateError)
        assert isinstance(error.code, str)
