"""The customs gateway, the gate and the rate controller on a simulated clock, free of I/O.

The adaptive controller's goals are about seconds of a downstream's life (reach 90 %
of a new capacity within 30 s, be under a lower one within 5 s, never get suspended),
and a real-time run on shared CPUs measures the CPUs as much as the maths. This model
replays the same loop event by event on a virtual clock: the gate admits calls at its
live rate (one token, like the fleet's GCRA with burst 1), each call reaches the
downstream after a seeded jitter, the downstream is the customs sim's own
:class:`~tidegate.sim.TokenBucket` following a capacity schedule and suspending after
repeated 429s, a 429 pauses the gate for its ``Retry-After`` (the fleet-wide pause),
and once a second the controller decides from what came back. Deterministic, so tests
can assert on it; the real thing is measured by ``bench/adaptive.py``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tidegate.flow.adaptive import (
    RateLimitHint,
    RatePolicy,
    RateState,
    RateWindow,
    decide_rate,
    initial_rate_state,
)
from tidegate.sim._customs import TokenBucket

__all__ = ["ModelRun", "capacity_at", "run_model"]

#: ``(at_s, rate)`` steps, as :class:`~tidegate.sim.CustomsSim` takes them.
Schedule = Sequence[tuple[float, float]]


def capacity_at(t: float, base: float, schedule: Schedule) -> float:
    """The capacity in force at ``t`` seconds."""
    rate = base
    for at_s, step in schedule:
        if t < at_s:
            break
        rate = step
    return rate


@dataclass
class ModelRun:
    """Per-second traces of one model run (index = second since the start).

    Attributes:
        accepted, throttled: calls answered 200 / 429 in each second.
        capacity: the downstream's true rate in each second.
        rate: the gate's live rate at the end of each second.
        suspensions: how many times the downstream suspended the fleet.
    """

    accepted: list[int] = field(default_factory=list)
    throttled: list[int] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    suspensions: int = 0

    def utilisation(self, start: int, end: int) -> float:
        """Accepted calls over what the capacity allowed in seconds ``[start, end)``."""
        return sum(self.accepted[start:end]) / sum(self.capacity[start:end])

    def reach_s(self, start: int, fraction: float = 0.9) -> float | None:
        """Seconds from ``start`` until the gate's rate is within ``fraction`` of the
        capacity (``None``: never)."""
        for t in range(start, len(self.rate)):
            if self.rate[t] >= fraction * self.capacity[t]:
                return float(t + 1 - start)
        return None

    def under_s(self, start: int) -> float | None:
        """Seconds from ``start`` until the gate's rate is at or below the capacity."""
        for t in range(start, len(self.rate)):
            if self.rate[t] <= self.capacity[t] + 1e-9:
                return float(t + 1 - start)
        return None

    def throttled_share(self) -> float:
        """429s as a share of accepted calls."""
        return sum(self.throttled) / max(1, sum(self.accepted))


class _Customs:
    """The customs sim's admission rule (bucket, schedule, suspension) on a virtual clock."""

    def __init__(
        self, base: float, burst: int, schedule: Schedule, suspend_after: int, suspend_s: float
    ) -> None:
        self.base, self.schedule = base, schedule
        self.bucket = TokenBucket(capacity_at(0.0, base, schedule), burst, now=0.0)
        self.suspend_after, self.suspend_s = suspend_after, suspend_s
        self.offences: deque[float] = deque()
        self.suspended_until: float | None = None
        self.suspensions = 0

    def call(self, now: float) -> float | None:
        """``None`` when accepted, else the ``Retry-After`` in seconds."""
        rate = capacity_at(now, self.base, self.schedule)
        if rate != self.bucket.rate:
            self.bucket.set_rate(rate, now)
        if self.suspended_until is not None:
            if now < self.suspended_until:
                return max(1.0, math.ceil(self.suspended_until - now - 1e-9))
            self.suspended_until = None
            self.offences.clear()
        wait = self.bucket.take(now)
        if wait == 0.0:
            return None
        self.offences.append(now)
        while self.offences and self.offences[0] <= now - 10.0:
            self.offences.popleft()
        if len(self.offences) >= self.suspend_after:
            self.suspended_until = now + self.suspend_s
            self.suspensions += 1
            self.offences.clear()
            return self.suspend_s
        return max(1.0, math.ceil(wait - 1e-9))


def run_model(
    policy: RatePolicy | None,
    *,
    seconds: int,
    capacity: float,
    schedule: Schedule = (),
    burst: int = 1,
    headers: bool = False,
    fixed_rate: float | None = None,
    jitter_s: float = 0.0,
    suspend_after: int = 5,
    suspend_s: float = 30.0,
    seed: int = 0,
    advertise: Callable[[float], RateLimitHint | None] | None = None,
) -> ModelRun:
    """Run the loop for ``seconds`` with an unlimited backlog.

    Args:
        policy: the rate controller's box; ``None`` with ``fixed_rate`` for a fixed gate.
        capacity, schedule, burst: the downstream's true (hidden) shape.
        headers: the downstream advertises its rate as ``X-RateLimit-Limit-Minute``
            does (``limit = rate × 60`` per 60 s) on every answer.
        jitter_s: each call reaches the downstream up to this long after its slot.
        advertise: a custom hint per answer time (overrides ``headers``).
    """
    rng = random.Random(seed)
    customs = _Customs(capacity, burst, schedule, suspend_after, suspend_s)
    state: RateState | None = None
    if policy is not None:
        state = initial_rate_state(policy)
        rate = state.rate
    else:
        assert fixed_rate is not None
        rate = fixed_rate
    out = ModelRun()
    slot, paused_until = 0.0, 0.0
    ok = throttled = 0
    hint: RateLimitHint | None = None
    for second in range(seconds):
        end = second + 1.0
        while True:
            slot = max(slot, paused_until)
            if slot >= end:
                break
            arrival = slot + (rng.uniform(0.0, jitter_s) if jitter_s else 0.0)
            retry_after = customs.call(arrival)
            cap = capacity_at(arrival, capacity, schedule)
            if advertise is not None:
                hint = advertise(arrival)
            elif headers:
                hint = RateLimitHint(limit=cap * 60.0, window_s=60.0, source="x-ratelimit")
            if retry_after is None:
                ok += 1
            else:
                throttled += 1
                paused_until = max(paused_until, arrival + retry_after)
            slot += 1.0 / rate
        out.accepted.append(ok)
        out.throttled.append(throttled)
        out.capacity.append(capacity_at(second, capacity, schedule))
        if policy is not None and state is not None:
            window = RateWindow(
                successes=ok,
                throttled=throttled,
                saturated=True,
                sent_rate=float(ok + throttled),
                hint=hint,
            )
            state = decide_rate(state, window, policy, now_ms=end * 1000.0).state
            rate = state.rate
        out.rate.append(rate)
        ok = throttled = 0
    out.suspensions = customs.suspensions
    return out
