"""The console's public surface: sorted, complete, and every error in the one tree."""

from __future__ import annotations

import tidegate.console
from tidegate.console import BadAction, ConsoleError, CsrfRefused, Forbidden, Unauthenticated
from tidegate.errors import TidegateError


def test_public_surface_is_sorted_and_complete() -> None:
    """`__all__` is sorted (constants first) and names every public object of the package."""
    names = tidegate.console.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    public = {
        name
        for name, value in vars(tidegate.console).items()
        if not name.startswith("_")
        and not isinstance(value, type(tidegate))
        and name != "annotations"
    }
    assert set(names) == public


def test_every_refusal_is_a_tidegate_error_with_its_status() -> None:
    """One tree: a caller catching TidegateError catches every console refusal."""
    statuses = {
        cls: cls.http_status for cls in (Unauthenticated, Forbidden, CsrfRefused, BadAction)
    }
    assert statuses == {Unauthenticated: 401, Forbidden: 403, CsrfRefused: 403, BadAction: 400}
    for cls in statuses:
        assert issubclass(cls, ConsoleError)
        assert issubclass(cls, TidegateError)
