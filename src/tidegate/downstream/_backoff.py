"""Retry backoff: exponential, capped, with full jitter.

"Full jitter" (AWS Architecture Blog, *Exponential Backoff And Jitter*) draws the delay
uniformly from ``[0, min(cap, base * 2**attempt)]``: retries of a fleet that failed
together spread out instead of arriving together again.
"""

from __future__ import annotations

import math
import random

from tidegate.errors import ConfigurationError

__all__ = ["DEFAULT_BACKOFF_BASE_S", "DEFAULT_BACKOFF_CAP_S", "backoff_delay"]

#: The ceiling of the first retry's delay, in seconds.
DEFAULT_BACKOFF_BASE_S = 0.5
#: No retry delay exceeds this, in seconds.
DEFAULT_BACKOFF_CAP_S = 60.0

_RNG = random.Random()


def backoff_delay(
    attempt: int,
    *,
    base: float = DEFAULT_BACKOFF_BASE_S,
    cap: float = DEFAULT_BACKOFF_CAP_S,
    rng: random.Random | None = None,
) -> float:
    """The delay before retry number ``attempt``: ``uniform(0, min(cap, base * 2**attempt))``.

    Args:
        attempt: 0 for the first retry, 1 for the second... (>= 0).
        base: the ceiling of the first delay, in seconds (> 0, finite).
        cap: the largest possible delay, in seconds (> 0, finite).
        rng: the random source; a module-level ``random.Random`` when omitted. Pass a
            seeded one for reproducible tests.

    Example::

        >>> backoff_delay(3, base=0.5, cap=60.0, rng=random.Random(7)) <= 4.0
        True
    """
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ConfigurationError(f"attempt must be an int >= 0, got {attempt!r}")
    for name, value in (("base", base), ("cap", cap)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
    try:
        ceiling = min(cap, math.ldexp(base, attempt))
    except OverflowError:
        ceiling = cap
    return (rng or _RNG).uniform(0.0, ceiling)
