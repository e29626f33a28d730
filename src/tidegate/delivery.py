"""What happens to a unit when its downstream call does not succeed — decided once.

Celery and RQ integrations both ask :func:`verdict_for` and only carry the verdict out,
so the rules live in one place:

- the gate cannot admit soon (``Throttled``) → **park** until it can; throttling never
  costs a retry attempt;
- the downstream said 429 → the client already paused the whole fleet; **retry in
  place** (the next acquire waits the pause out, or parks) a few times, then park;
- the downstream is unavailable (503, refused, timeout) → **park** with exponential
  backoff and full jitter, until the unit has failed ``max_attempts`` times *and* has
  been failing for ``min_horizon_s`` → **dead-letter** "retries exhausted". Jitter
  makes the sum of the backoff delays random (it can be near 0); the horizon makes
  the promise operators need: an outage shorter than it dead-letters nothing. Between
  the last attempt and the horizon the unit probes every ``cap/2``–``cap`` seconds;
- the downstream refused the document (4xx) → **dead-letter** at once, with its error
  code: retrying a document the downstream calls invalid only hammers it;
- the unit itself is malformed (``MalformedUnit``) → **dead-letter** at once;
- Redis itself is unreachable → **requeue**: nothing can be parked or dead-lettered,
  so the broker keeps the message;
- anything else (a bug) → **dead-letter** with the exception class, replayable after
  the fix. Nothing ends as a log line only.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import NamedTuple

from tidegate.downstream import backoff_delay
from tidegate.errors import (
    BackendUnavailable,
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
    MalformedUnit,
    Throttled,
)

__all__ = ["Action", "RetryPolicy", "Verdict", "verdict_for"]


class Action(enum.Enum):
    RETRY_IN_PLACE = "retry_in_place"
    PARK = "park"
    DEAD_LETTER = "dead_letter"
    REQUEUE = "requeue"


class Verdict(NamedTuple):
    """The decision: what to do, after how long, why, and the attempt count to carry on."""

    action: Action
    delay_s: float
    reason: str
    attempt: int


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on retrying one unit.

    Args:
        max_attempts: delivery attempts against an unavailable downstream before the
            unit may be dead-lettered (>= 1).
        min_horizon_s: how long a unit keeps being retried, at least, from its first
            failure (seconds, >= 0): no outage shorter than this dead-letters anything,
            whatever the jitter drew. Measured on the workers' wall clocks, which only
            need to agree to the second.
        backoff_base_s: ceiling of the first backoff delay.
        backoff_cap_s: ceiling of every backoff delay.
        max_throttle_loops: 429s absorbed in place before the unit is parked.
    """

    max_attempts: int = 8
    min_horizon_s: float = 600.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    max_throttle_loops: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts!r}")
        if not (self.min_horizon_s >= 0 and self.min_horizon_s != float("inf")):
            raise ConfigurationError(
                f"min_horizon_s must be a finite number >= 0, got {self.min_horizon_s!r}"
            )
        if self.max_throttle_loops < 0:
            raise ConfigurationError(
                f"max_throttle_loops must be >= 0, got {self.max_throttle_loops!r}"
            )


_TRANSIENT_NAMES = frozenset({"SoftTimeLimitExceeded", "TimeoutError", "ConnectionError"})


def _jitter(delay_s: float, rng: random.Random) -> float:
    """Spread parked units that became due together over up to 10 % (≤ 1 s) more."""
    return delay_s + rng.uniform(0.0, min(1.0, 0.1 * delay_s))


def verdict_for(
    exc: BaseException,
    *,
    attempt: int,
    throttles: int,
    policy: RetryPolicy,
    failing_for_s: float = 0.0,
    rng: random.Random | None = None,
) -> Verdict:
    """Decide what to do with a unit whose delivery raised ``exc``.

    Args:
        exc: what the gate or the downstream call raised.
        attempt: failed delivery attempts so far (0 on the first try).
        throttles: 429s already absorbed in place during this execution.
        policy: the bounds.
        failing_for_s: seconds since the unit's first failed attempt (0 on the first).
        rng: random source for jitter (seeded in tests).
    """
    rng = rng or random.Random()
    if isinstance(exc, Throttled):
        return Verdict(Action.PARK, _jitter(exc.wait_s, rng), f"gate_{exc.reason}", attempt)
    if isinstance(exc, DownstreamThrottled):
        if throttles < policy.max_throttle_loops:
            return Verdict(Action.RETRY_IN_PLACE, 0.0, "http_429", attempt)
        return Verdict(Action.PARK, _jitter(exc.retry_after, rng), "http_429", attempt)
    if isinstance(exc, DownstreamRejected):
        status = f"HTTP {exc.status}" if exc.status else "rejected"
        if exc.code:
            status = f"{status} {exc.code}"
        return Verdict(
            Action.DEAD_LETTER, 0.0, f"downstream rejected the document ({status})", attempt + 1
        )
    if isinstance(exc, MalformedUnit):
        return Verdict(Action.DEAD_LETTER, 0.0, f"malformed unit: {exc.problem}", attempt + 1)
    if isinstance(exc, BackendUnavailable):
        return Verdict(Action.REQUEUE, 0.0, "redis_unavailable", attempt)
    if isinstance(exc, DownstreamUnavailable) or type(exc).__name__ in _TRANSIENT_NAMES:
        failed = attempt + 1
        if failed >= policy.max_attempts and failing_for_s >= policy.min_horizon_s:
            return Verdict(
                Action.DEAD_LETTER,
                0.0,
                f"retries exhausted after {failed} attempts ({type(exc).__name__})",
                failed,
            )
        if failed >= policy.max_attempts:
            # Attempts spent, horizon not reached: probe at the cap, never faster than
            # every cap/2, so a long outage costs each unit a call per ~45 s, not a storm.
            delay = rng.uniform(policy.backoff_cap_s / 2, policy.backoff_cap_s)
        else:
            delay = backoff_delay(
                attempt, base=policy.backoff_base_s, cap=policy.backoff_cap_s, rng=rng
            )
        return Verdict(Action.PARK, delay, "downstream_unavailable", failed)
    return Verdict(Action.DEAD_LETTER, 0.0, f"unexpected error ({type(exc).__name__})", attempt + 1)
