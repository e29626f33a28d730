"""What a downstream says about its own quota, as a value the rate controller can use.

Discovering a rate from rejections costs rejections; a downstream that publishes its
quota in rate-limit headers saves them all. The headers come in several dialects (the
IETF httpapi draft's ``RateLimit-Policy`` / ``RateLimit``, its older ``RateLimit-Limit``
family, the de-facto ``X-RateLimit-*``); the parser in
:mod:`tidegate.downstream._ratelimit_headers` reads them all into this one value, so the
controller never sees a header.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tidegate.errors import ConfigurationError

__all__ = ["MIN_RESET_S", "HintSource", "RateLimitHint"]

#: Which header dialect a hint was read from (kept for the decision's log event).
HintSource: TypeAlias = Literal["ietf", "ietf-legacy", "x-ratelimit"]

#: ``remaining / reset`` is read with the reset at least this long, in seconds. A
#: reset a few ms away would otherwise allow a huge instantaneous rate that is still
#: being sent after the window has turned over, into the next window's quota.
MIN_RESET_S = 1.0


def _check(name: str, value: float | None, *, positive: bool) -> None:
    if value is None:
        return
    ok = math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ConfigurationError(f"{name} must be a finite number {bound} or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class RateLimitHint:
    """A downstream's advertised quota and what is left of it.

    Args:
        limit: quota units per window (``q`` of the draft, ``X-RateLimit-Limit``).
        window_s: the quota's window in seconds (``w``); ``None`` when the dialect
            does not say (``X-RateLimit-Limit`` alone).
        remaining: quota units left in the current window (``r``).
        reset_s: seconds until the quota refills (``t``), relative to the response.
        source: the header dialect it was read from.

    Example::

        >>> RateLimitHint(limit=600, window_s=60, remaining=600, reset_s=60).safe_rate
        10.0
    """

    limit: float | None = None
    window_s: float | None = None
    remaining: float | None = None
    reset_s: float | None = None
    source: HintSource = "ietf"

    def __post_init__(self) -> None:
        _check("limit", self.limit, positive=False)
        _check("window_s", self.window_s, positive=True)
        _check("remaining", self.remaining, positive=False)
        _check("reset_s", self.reset_s, positive=False)

    @property
    def sustained_rate(self) -> float | None:
        """The long-run rate the quota allows, calls per second (``limit / window``)."""
        if self.limit is None or self.window_s is None:
            return None
        return self.limit / self.window_s

    @property
    def exhausted(self) -> bool:
        """Nothing is left until the reset: the next call would be refused."""
        return self.remaining is not None and self.remaining < 1 and (self.reset_s or 0) > 0

    @property
    def safe_rate(self) -> float | None:
        """The highest rate that cannot run out of quota, calls per second.

        The sustained rate, lowered to ``remaining / reset`` when less is left than
        that pace needs (a fixed window spent early); ``None`` when the hint carries
        neither. Exhausted hints give ``None``: there is no rate, only a wait.
        """
        if self.exhausted:
            return None
        rates = []
        sustained = self.sustained_rate
        if sustained is not None and sustained > 0:
            rates.append(sustained)
        if self.remaining is not None and self.reset_s is not None:
            rates.append(self.remaining / max(self.reset_s, MIN_RESET_S))
        positive = [rate for rate in rates if rate > 0]
        return min(positive) if positive else None
