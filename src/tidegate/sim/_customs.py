"""A customs single-window gateway: a quota it advertises, a throttle it enforces.

The gateway publishes ``X-RateLimit-Limit-Minute: rate * 60`` — and really enforces a
per-second token bucket with a small burst. A fleet that believes the header and sends
a minute's quota at once gets 429s. Repeated offences get the caller suspended: every
call is refused for a while, the way real single windows punish clients that ignore
``Retry-After``.

Its capacity is not constant either: a *schedule* of ``(at_s, rate)`` steps changes
the enforced rate while it runs (10/s, then 4/s for a maintenance minute, then 10/s),
and ``quota_headers="none"`` stops it advertising anything, so a client that keeps up
can only have learned the schedule from the 429s.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from email.utils import formatdate
from typing import Any, Literal, TypeAlias

from tidegate.errors import ConfigurationError
from tidegate.logging import get_logger
from tidegate.sim._base import DEFAULT_HOST, Clock, SimServer, Verdict, check_positive

__all__ = ["CapacitySchedule", "CustomsSim", "QuotaHeaders", "RetryAfterFormat", "TokenBucket"]

log = get_logger("tidegate.sim")

#: How the gateway writes ``Retry-After``: delay-seconds or an HTTP-date (RFC 9110).
RetryAfterFormat: TypeAlias = Literal["seconds", "http-date"]
#: Whether the gateway advertises its quota (``X-RateLimit-Limit-Minute``) or says nothing.
QuotaHeaders: TypeAlias = Literal["minute", "none"]
#: ``(at_s, rate)`` steps: from ``at_s`` seconds after the sim's start (or last reset)
#: on, the enforced rate is ``rate`` calls per second.
CapacitySchedule: TypeAlias = Sequence[tuple[float, float]]

# Float refill arithmetic may leave 0.9999999 of a token where 1 was earned.
_EPSILON = 1e-9


class TokenBucket:
    """A token bucket: ``burst`` tokens at most, refilled at ``rate`` per second.

    Args:
        rate: tokens per second (> 0).
        burst: capacity in tokens (>= 1); the bucket starts full.
        now: the current instant in seconds, on any monotonic clock.

    Example::

        >>> bucket = TokenBucket(rate=1.0, burst=2, now=0.0)
        >>> bucket.take(0.0), bucket.take(0.0), bucket.take(0.0)
        (0.0, 0.0, 1.0)
        >>> bucket.take(1.0)
        0.0
    """

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: int, *, now: float) -> None:
        self.rate = float(check_positive("rate", rate))
        if burst < 1:
            raise ConfigurationError(f"burst must be >= 1, got {burst!r}")
        self.burst = burst
        self._tokens = float(burst)
        self._last = now

    def set_rate(self, rate: float, now: float) -> None:
        """Refill at ``rate`` from ``now`` on; tokens earned until ``now`` are kept."""
        self._tokens = self.tokens(now)
        self._last = max(self._last, now)
        self.rate = float(check_positive("rate", rate))

    def reset(self, now: float) -> None:
        """Refill the bucket."""
        self._tokens = float(self.burst)
        self._last = now

    def take(self, now: float) -> float:
        """Take one token at ``now``.

        Returns:
            0.0 when a token was taken; otherwise the seconds until one is available
            (nothing is taken).
        """
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)
        self._last = max(self._last, now)
        if self._tokens >= 1.0 - _EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def tokens(self, now: float) -> float:
        """The tokens available at ``now`` (read-only)."""
        elapsed = max(0.0, now - self._last)
        return min(float(self.burst), self._tokens + elapsed * self.rate)


class CustomsSim(SimServer):
    """The customs gateway: advertised per-minute quota, enforced per-second bucket.

    Args:
        rate: the enforced sustained rate, in calls per second (> 0).
        burst: calls accepted back to back on a full bucket (>= 1).
        suspend_after: this many 429s within ``suspend_window_s`` suspend the caller;
            ``None`` (the default) never suspends.
        suspend_window_s: the sliding window counting offences, in seconds.
        suspend_s: how long a suspension lasts, in seconds: every call is answered
            429 with ``Retry-After`` = the remaining suspension.
        retry_after_format: ``"seconds"`` or ``"http-date"``.
        schedule: ``(at_s, rate)`` steps changing the enforced rate ``at_s`` seconds
            after the sim was built (or last reset); ``at_s`` strictly increasing and
            >= 0, rates > 0. Before the first step the rate is ``rate``. The bucket
            keeps the tokens it holds when the rate changes.
        quota_headers: ``"minute"`` (the default) advertises ``X-RateLimit-Limit-Minute``
            for the rate in force; ``"none"`` advertises nothing.
        service_s: how long an accepted declaration takes to process.
        path: the write path.
        host, port, clock, wall_clock, sleep: see :class:`~tidegate.sim.SimServer`.

    An over-rate call is answered 429 with ``Retry-After`` = the honest time until a
    token is available, rounded up to whole seconds, at least 1. 429s answered during
    a suspension are not offences (the suspension would otherwise never end for a
    client that keeps calling); the offence window restarts after a suspension.

    Warning:
        ``X-RateLimit-Limit-Minute`` says ``rate * 60``; sending that many in one
        minute's first second is exactly what the bucket refuses.
    """

    kind = "customs"

    def __init__(
        self,
        rate: float,
        burst: int = 1,
        *,
        suspend_after: int | None = None,
        suspend_window_s: float = 10.0,
        suspend_s: float = 30.0,
        retry_after_format: RetryAfterFormat = "seconds",
        schedule: CapacitySchedule = (),
        quota_headers: QuotaHeaders = "minute",
        service_s: float = 0.0,
        path: str = "/declarations",
        host: str = DEFAULT_HOST,
        port: int = 0,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        super().__init__(
            path=path, host=host, port=port, clock=clock, wall_clock=wall_clock, sleep=sleep
        )
        if suspend_after is not None and suspend_after < 1:
            raise ConfigurationError(f"suspend_after must be >= 1 or None, got {suspend_after!r}")
        if retry_after_format not in ("seconds", "http-date"):
            raise ConfigurationError(f"unknown retry_after_format {retry_after_format!r}")
        self.suspend_after = suspend_after
        self.suspend_window_s = check_positive("suspend_window_s", suspend_window_s)
        self.suspend_s = check_positive("suspend_s", suspend_s)
        self.retry_after_format: RetryAfterFormat = retry_after_format
        if quota_headers not in ("minute", "none"):
            raise ConfigurationError(f"quota_headers must be 'minute' or 'none': {quota_headers!r}")
        self.quota_headers: QuotaHeaders = quota_headers
        self.base_rate = float(check_positive("rate", rate))
        self.schedule: tuple[tuple[float, float], ...] = _check_schedule(schedule)
        self._origin = self._clock()
        self.service_s = check_positive("service_s", service_s, allow_zero=True)
        self._bucket = TokenBucket(self._scheduled_rate(self._origin), burst, now=self._origin)
        self._offences: deque[float] = deque()
        self._suspended_until: float | None = None
        self._suspensions = 0

    @property
    def rate(self) -> float:
        """The enforced rate, calls per second."""
        return self._bucket.rate

    @property
    def burst(self) -> int:
        """The bucket capacity."""
        return self._bucket.burst

    @property
    def advertised_per_minute(self) -> float:
        """What ``X-RateLimit-Limit-Minute`` claims."""
        return self.rate * 60

    def _scheduled_rate(self, now: float) -> float:
        rate = self.base_rate
        for at_s, step in self.schedule:
            if now - self._origin < at_s:
                break
            rate = step
        return rate

    def _follow_schedule(self, now: float) -> None:
        """Apply the step in force at ``now``; called under the sim lock."""
        rate = self._scheduled_rate(now)
        if rate != self._bucket.rate:
            previous = self._bucket.rate
            self._bucket.set_rate(rate, now)
            log.warning("sim_capacity_changed", kind=self.kind, rate=rate, previous=previous)

    def _admit(self, now: float) -> Verdict:
        self._follow_schedule(now)
        if self._suspended_until is not None:
            if now < self._suspended_until:
                remaining = math.ceil(self._suspended_until - now - 1e-9)
                return Verdict(429, retry_after_s=max(1, remaining), reason="suspended")
            self._suspended_until = None
            self._offences.clear()
        wait_s = self._bucket.take(now)
        if wait_s == 0.0:
            return Verdict(200, service_s=self.service_s)
        if self.suspend_after is not None:
            self._offences.append(now)
            while self._offences and self._offences[0] <= now - self.suspend_window_s:
                self._offences.popleft()
            if len(self._offences) >= self.suspend_after:
                self._suspended_until = now + self.suspend_s
                self._suspensions += 1
                self._offences.clear()
                log.warning(
                    "sim_customs_suspended",
                    kind=self.kind,
                    suspend_s=self.suspend_s,
                    suspensions=self._suspensions,
                )
                retry_after = max(1, math.ceil(self.suspend_s - 1e-9))
                return Verdict(429, retry_after_s=retry_after, reason="suspended")
        retry_after = max(1, math.ceil(wait_s - 1e-9))
        return Verdict(429, retry_after_s=retry_after, reason="rate_limited")

    def _reset_policy(self, now: float) -> None:
        self._origin = now
        self._bucket.set_rate(self._scheduled_rate(now), now)
        self._bucket.reset(now)
        self._offences.clear()
        self._suspended_until = None
        self._suspensions = 0

    def _policy_stats(self, now: float) -> dict[str, Any]:
        self._follow_schedule(now)
        until = self._suspended_until
        suspended = until is not None and now < until
        return {
            "rate": self.rate,
            "burst": self.burst,
            "advertised_per_minute": self.advertised_per_minute,
            "tokens": round(self._bucket.tokens(now), 6),
            "suspended": suspended,
            "suspended_until_ts": self._to_wall(until) if until is not None and suspended else None,
            "suspensions": self._suspensions,
            "schedule": [list(step) for step in self.schedule],
        }

    def _extra_headers(self) -> dict[str, str]:
        if self.quota_headers == "none":
            return {}
        self._follow_schedule(self._clock())  # the quota in force, even on a step's edge
        per_minute = self.advertised_per_minute
        shown = str(int(per_minute)) if per_minute.is_integer() else f"{per_minute:.3f}"
        return {"X-RateLimit-Limit-Minute": shown}

    def _format_retry_after(self, now: float, seconds: int) -> str:
        if self.retry_after_format == "http-date":
            # Round the date up: a truncated date would ask for less than the honest wait.
            return formatdate(math.ceil(self._to_wall(now) + seconds), usegmt=True)
        return str(seconds)


def _check_schedule(schedule: CapacitySchedule) -> tuple[tuple[float, float], ...]:
    steps = []
    previous = -math.inf
    for step in schedule:
        try:
            at_s, rate = (float(value) for value in step)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"a schedule step is (at_s, rate), got {step!r}") from exc
        check_positive("schedule at_s", at_s, allow_zero=True)
        check_positive("schedule rate", rate)
        if at_s <= previous:
            raise ConfigurationError(f"schedule steps must be in increasing at_s order: {at_s!r}")
        previous = at_s
        steps.append((at_s, rate))
    return tuple(steps)
