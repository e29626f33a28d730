"""Waiting on a real condition: how the tests and the harness wait, never a bare sleep.

A test that sleeps "long enough" passes on a quiet machine and fails on a busy one, or
passes for the wrong reason; polling a condition that could stay false says what it
waited for when it gives up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_for"]


def wait_for(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str | Callable[[], str] = "",
    *,
    every_s: float = 0.05,
) -> None:
    """Poll ``predicate`` every ``every_s`` until it is true; after ``timeout_s`` fail.

    Args:
        predicate: the condition; checked at once, then after each ``every_s``.
        timeout_s: how long to wait at most, seconds.
        what: what was awaited, for the failure: a string, or a callable evaluated only
            then (a fleet's logs, its state).
        every_s: the polling interval, seconds.

    Raises:
        AssertionError: ``predicate`` did not hold within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"not within {timeout_s}s: {said}")
        time.sleep(every_s)
