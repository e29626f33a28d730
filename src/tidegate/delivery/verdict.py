"""What happens to a unit when its downstream call does not succeed — decided once.

The unit lifecycle (:mod:`tidegate.delivery.lifecycle`) asks :func:`judge` and every
engine only carries the verdict out, so the rules live in one place:

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

The horizon compares a first-failure time written by one worker with "now" read by
another, so both come from the fleet clock (Redis ``TIME``, :func:`fleet_now_s`), never
a worker's wall clock: a host whose clock runs an hour ahead would otherwise
dead-letter every unit an hour early. :func:`judge` stays pure — the time is an input.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tidegate.downstream import backoff_delay
from tidegate.errors import (
    BackendError,
    BackendUnavailable,
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
    MalformedUnit,
    Throttled,
)

if TYPE_CHECKING:
    from tidegate.flow import Gate

__all__ = [
    "Action",
    "RetryPolicy",
    "Verdict",
    "fleet_now_s",
    "judge",
    "judge_now",
    "verdict_for",
]


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
            whatever the jitter drew. Measured on the fleet clock (Redis ``TIME``),
            so no worker's wall clock can shorten it.
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


def judge(
    exc: BaseException,
    *,
    now_s: float,
    first_failed_at: float | None,
    attempt: int,
    throttles: int,
    policy: RetryPolicy,
    rng: random.Random | None = None,
) -> tuple[Verdict, float | None]:
    """:func:`verdict_for` plus the horizon's bookkeeping, at fleet time ``now_s``.

    Both adapters must stamp and measure the horizon the same way; keeping it here
    keeps it pure and in one place.

    Args:
        exc: what the gate or the downstream call raised.
        now_s: the fleet clock's time (epoch seconds), see :func:`fleet_now_s`.
        first_failed_at: the unit's first failed attempt (fleet clock), ``None`` if none.
        attempt: failed delivery attempts so far.
        throttles: 429s already absorbed in place during this execution.
        policy: the bounds.
        rng: random source for jitter (seeded in tests).

    Returns:
        The verdict, and the first-failure time to carry on with the unit: ``now_s``
        when this is its first failed attempt, else ``first_failed_at`` unchanged.
    """
    failing_for_s = 0.0 if first_failed_at is None else max(0.0, now_s - first_failed_at)
    verdict = verdict_for(
        exc,
        attempt=attempt,
        throttles=throttles,
        policy=policy,
        failing_for_s=failing_for_s,
        rng=rng,
    )
    if first_failed_at is None and verdict.attempt > attempt:
        first_failed_at = now_s
    return verdict, first_failed_at


def fleet_now_s(gate: Gate) -> float:
    """The fleet clock in epoch seconds: Redis ``TIME``, read through ``gate``'s backend.

    One round trip, and the same clock the gate decides on; a memory backend answers
    with its own (injectable) clock, so tests need no Redis and no sleeping.

    Raises:
        BackendError: the backend cannot be read (``BackendUnavailable`` when Redis is
            unreachable).
    """
    return gate.backend.snapshot(gate.limit.keys).now_ms / 1000.0


def judge_now(
    gate: Gate,
    exc: Exception,
    *,
    attempt: int,
    throttles: int,
    policy: RetryPolicy,
    first_failed_at: float | None,
) -> tuple[Verdict, float | None]:
    """:func:`judge` at the fleet clock's time, as both worker adapters need it.

    If Redis cannot even tell the time, nothing can be parked or dead-lettered
    either: the clock's error is judged instead (a requeue when Redis is down).
    """
    try:
        now = fleet_now_s(gate)
    except BackendError as clock_exc:
        exc, now = clock_exc, 0.0
    return judge(
        exc,
        now_s=now,
        first_failed_at=first_failed_at,
        attempt=attempt,
        throttles=throttles,
        policy=policy,
    )
