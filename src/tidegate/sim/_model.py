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

Real processes add delays the controller must not mistake for evidence, and the
model can add them too (all off by default, the model's first form):

* ``admit_lead_s`` — the gate reserves slots ahead for the workers waiting on it, so a
  call is *admitted* (its slot spaced at the rate in force then) up to this long before
  it goes: a cut does not respace the slots already handed out;
* ``report_s`` — a call's answer reaches the controller's window up to this long after
  the call reached the downstream (its latency, the report's round trip, a busy CPU):
  a 429 can land in the window of the tick *after* the cut it already caused;
* ``pause_s`` — a 429 pauses the fleet up to this long after its call reached the
  downstream. A worker writes the pause as soon as it reads the 429 (the answer's way
  back and one Redis round trip: ``bench/adaptive.py`` measures it), long before the
  controller's next tick; unset, the pause waits for the report, as in the model's
  first form, which made every 429 admit up to ``report_s`` more calls into a bucket
  that had run dry.

* ``tick_s`` / ``tick_jitter_s`` — a real controller's ticks drift (its loop waits a
  tick after each run: 1.0025-1.003 s apart on the bench's runs), so a ceiling's windows
  do not stay lined up with a bucket's refills the way exact seconds do;
* ``wake_on_429`` — the live loop waits on the window's 429 token between ticks and
  decides as soon as a 429 is reported (its next tick comes ``tick_s`` after that).

The first two make the echo of a failed probe: 429s from calls admitted before the
cut, counted after it. Each throttled call carries its admission time into the window
(``RateWindow.throttled_admitted_ms``) unless ``stamped`` is off, like an observer
that does not know it.
"""

from __future__ import annotations

import heapq
import math
import random
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tidegate.errors import ConfigurationError
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
        decisions: ``(second, reason, rate)`` of every decision that changed the rate.
    """

    accepted: list[int] = field(default_factory=list)
    throttled: list[int] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    suspensions: int = 0
    decisions: list[tuple[int, str, float]] = field(default_factory=list)

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


@dataclass
class _Window:
    """The answers that reached the controller's window since the last tick."""

    ok: int = 0
    throttled: int = 0
    admitted_max: float | None = None  # the latest admission among the throttled


class _Fleet:
    """The gate and the workers on the virtual clock: slots, pauses, reports.

    A slot is spaced at the rate in force when it was *admitted* (``admit_lead_s``
    before it, or when a pause ended: a slot reserved before a pause is forfeited and
    admitted anew at its end, with every other caller that waited on it). A 429 pauses
    the fleet from the moment its worker wrote the pause (``pause_s``; unset: when its
    answer is reported), and the answer joins the window of the tick after its report.
    """

    def __init__(
        self, rate: float, *, admit_lead_s: float, report_s: float, pause_s: float | None
    ) -> None:
        self.rates_at, self.rates = [0.0], [rate]  # the gate's rate from each tick on
        self.admit_lead_s, self.report_s, self.pause_s = admit_lead_s, report_s, pause_s
        self.slot = self.paused_until = 0.0
        self.last_tick = 0.0  # when the controller last decided
        self.throttled_at: list[float] = []  # heap: when each pending 429 is reported
        self.pauses: list[tuple[float, float]] = []  # heap: (known_at, until)
        self.reports: list[tuple[float, int, bool, float]] = []  # heap: (at, n, ok, admitted)
        self.sent = 0

    def next_slot(self, end: float) -> tuple[float, float] | None:
        """The next call's ``(slot, admitted)`` before ``end``, or ``None``."""
        while self.pauses and self.pauses[0][0] <= max(self.slot, self.paused_until):
            self.paused_until = max(self.paused_until, heapq.heappop(self.pauses)[1])
        self.slot = max(self.slot, self.paused_until)
        if self.slot >= end:
            return None
        return self.slot, max(self.slot - self.admit_lead_s, self.paused_until)

    def answered(
        self, rng: random.Random, slot: float, admitted: float, arrival: float, retry: float | None
    ) -> None:
        """Record one answer and space the slot after it."""
        known = slot if self.report_s == 0 else arrival + rng.uniform(0.0, self.report_s)
        heapq.heappush(self.reports, (known, self.sent, retry is None, admitted))
        if retry is not None:
            heapq.heappush(self.throttled_at, known)
        self.sent += 1
        if retry is not None:
            written = known
            if self.pause_s is not None:
                written = arrival + (rng.uniform(0.0, self.pause_s) if self.pause_s else 0.0)
            heapq.heappush(self.pauses, (written, arrival + retry))
        rate = self.rates[bisect_right(self.rates_at, max(0.0, admitted)) - 1]
        self.slot += 1.0 / rate

    def woken_at(self, regular: float) -> float:
        """When the controller decides next, woken by a 429's report: the earliest 429
        not yet in a window if it comes before the ``regular`` tick."""
        if self.throttled_at and self.throttled_at[0] < regular:
            return max(self.throttled_at[0], self.last_tick) + 1e-6
        return regular

    def rate_window(self, end: float, hint: RateLimitHint | None, *, stamped: bool) -> RateWindow:
        """The controller's window at ``end``, every call saturated (unlimited backlog)."""
        seen = self.window(end)
        stamp = seen.admitted_max if stamped else None
        return RateWindow(
            successes=seen.ok,
            throttled=seen.throttled,
            saturated=True,
            sent_rate=float(seen.ok + seen.throttled) / (end - self.last_tick),
            hint=hint,
            throttled_admitted_ms=None if stamp is None else stamp * 1000.0,
        )

    def window(self, end: float) -> _Window:
        """Take the answers reported before ``end``."""
        while self.throttled_at and self.throttled_at[0] < end:
            heapq.heappop(self.throttled_at)
        window = _Window()
        while self.reports and self.reports[0][0] < end:
            _, _, accepted, admitted = heapq.heappop(self.reports)
            if accepted:
                window.ok += 1
                continue
            window.throttled += 1
            latest = window.admitted_max
            window.admitted_max = admitted if latest is None else max(latest, admitted)
        return window

    def retune(self, at: float, rate: float) -> None:
        self.rates_at.append(at)
        self.rates.append(rate)


@dataclass
class _Wire:
    """A call's way to the downstream: its arrival jitter, the answer, the headers."""

    customs: _Customs
    rng: random.Random
    jitter_s: float
    advertise: Callable[[float], RateLimitHint | None] | None
    headers: bool
    capacity: float
    schedule: Schedule
    hint: RateLimitHint | None = None  # the latest answer's rate-limit headers

    def send(self, slot: float) -> tuple[float, float | None]:
        """``(arrival, retry_after)`` of the call in ``slot``; ``None``: accepted."""
        arrival = slot + (self.rng.uniform(0.0, self.jitter_s) if self.jitter_s else 0.0)
        retry_after = self.customs.call(arrival)
        if self.advertise is not None:
            self.hint = self.advertise(arrival)
        elif self.headers:
            # The downstream's rate as ``X-RateLimit-Limit-Minute`` advertises it.
            rate = capacity_at(arrival, self.capacity, self.schedule)
            self.hint = RateLimitHint(limit=rate * 60.0, window_s=60.0, source="x-ratelimit")
        return arrival, retry_after


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
    admit_lead_s: float = 0.0,
    report_s: float = 0.0,
    pause_s: float | None = None,
    stamped: bool = True,
    tick_s: float = 1.0,
    tick_jitter_s: float = 0.0,
    wake_on_429: bool = False,
) -> ModelRun:
    """Run the loop for ``seconds`` with an unlimited backlog.

    Args:
        policy: the rate controller's box; ``None`` with ``fixed_rate`` for a fixed gate.
        capacity, schedule, burst: the downstream's true (hidden) shape.
        headers: the downstream advertises its rate as ``X-RateLimit-Limit-Minute``
            does (``limit = rate × 60`` per 60 s) on every answer.
        jitter_s: each call reaches the downstream up to this long after its slot.
        advertise: a custom hint per answer time (overrides ``headers``).
        admit_lead_s: each slot was reserved (at the rate then in force) this long
            before it, seconds; 0: at the slot itself.
        report_s: each answer reaches the window up to this long after the call
            reached the downstream, seconds; 0: in the tick of the call's slot, at once.
        pause_s: each 429 pauses the fleet up to this long after its call reached the
            downstream, seconds; ``None``: when its answer is reported (``report_s``).
        stamped: throttled calls carry their admission time into the window.
        tick_s, tick_jitter_s: the controller decides every ``tick_s`` seconds plus up
            to ``tick_jitter_s`` more (drawn apart from the calls' jitter, so a run with
            the defaults is the same as before they existed). A real controller's ticks
            drift (1.0025-1.003 s apart on the bench's runs), so a ceiling's first
            windows do not line up with a bucket's refills as exact seconds do.
        wake_on_429: the controller also decides as soon as a 429 is reported, not at
            its next tick (and ticks ``tick_s`` after that).
    """
    if not (tick_s > 0 and tick_jitter_s >= 0):
        raise ConfigurationError(
            f"tick_s must be > 0 and tick_jitter_s >= 0, got {tick_s!r} and {tick_jitter_s!r}"
        )
    rng = random.Random(seed)
    customs = _Customs(capacity, burst, schedule, suspend_after, suspend_s)
    state: RateState | None = None
    if policy is not None:
        state = initial_rate_state(policy)
        rate = state.rate
    else:
        assert fixed_rate is not None
        rate = fixed_rate
    fleet = _Fleet(rate, admit_lead_s=admit_lead_s, report_s=report_s, pause_s=pause_s)
    out = ModelRun(
        accepted=[0] * seconds,
        throttled=[0] * seconds,
        capacity=[capacity_at(second, capacity, schedule) for second in range(seconds)],
    )
    wire = _Wire(customs, rng, jitter_s, advertise, headers, capacity, schedule)
    ticks = random.Random(f"ticks-{seed}")
    tick_end = 0.0
    while len(out.rate) < seconds:
        regular = tick_end + tick_s + (ticks.uniform(0.0, tick_jitter_s) if tick_jitter_s else 0.0)
        tick_end = regular
        while True:
            if wake_on_429:
                tick_end = fleet.woken_at(regular)
            call = fleet.next_slot(min(tick_end, float(seconds)))
            if call is None:
                break
            slot, admitted = call
            arrival, retry_after = wire.send(slot)
            counts = out.accepted if retry_after is None else out.throttled
            counts[int(slot)] += 1
            fleet.answered(rng, slot, admitted, arrival, retry_after)
        # The rate at the end of each whole second before this tick's decision.
        while len(out.rate) < seconds and len(out.rate) + 1 < tick_end - 1e-9:
            out.rate.append(rate)
        if tick_end > seconds:
            break
        if policy is not None and state is not None:
            window = fleet.rate_window(tick_end, wire.hint, stamped=stamped)
            decision = decide_rate(state, window, policy, now_ms=tick_end * 1000.0)
            state = decision.state
            if state.rate != rate:
                out.decisions.append((math.ceil(tick_end) - 1, decision.reason, state.rate))
                fleet.retune(tick_end, state.rate)
            rate = state.rate
        fleet.last_tick = tick_end
        if abs(tick_end - round(tick_end)) < 1e-9 and len(out.rate) < seconds:
            out.rate.append(rate)
    out.suspensions = customs.suspensions
    return out
