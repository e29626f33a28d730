"""Concurrency discovery from latency: a gradient controller, free of I/O.

A terminal operating system does not say 429; it gets slower. While fewer calls are in
flight than it can serve, latency sits at its floor; beyond that, calls queue and
latency grows with every extra one. The gradient ``tolerance × minimum latency /
recent latency`` (Netflix concurrency-limits' Gradient2, Envoy's adaptive concurrency
filter) measures that queue without knowing the capacity: about 1 while there is
none, below 1 as it builds. Each decision moves the fleet-wide limit to::

    limit × clamp(gradient, 0.5, 1) + headroom      (smoothed, within [min, max])

so a flat latency lets the limit grow by the headroom (``sqrt(limit)`` by default) and
a growing one shrinks it, at most halving per decision (the clamp Lyft added after
the unclamped gradient over-reacted, envoy PR #9038). A 503 or refused connection is
a hard signal: the limit is cut by ``backoff_factor``.

The minimum latency is the one number that must not drift: measured while calls
queue, it would take the queue for the baseline and let the limit ratchet up. So it
is only ever lowered by what the fleet sees, and every ``remeasure_s`` it is measured
afresh with the limit pinned to ``probe_concurrency`` for a window (Envoy's approach;
here the calls above the pin wait for a lease instead of being refused). A baseline
that really got slower is re-learned at the next re-measurement rather than strangling
the fleet for good (envoy #38338). The limit grows only while the fleet uses half of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._policy import ConcurrencyPolicy, Mode

__all__ = [
    "ConcurrencyDecision",
    "ConcurrencyReason",
    "ConcurrencyState",
    "LatencyWindow",
    "decide_concurrency",
    "initial_concurrency_state",
]

#: Gradient2 and Envoy clamp the gradient to [0.5, 1] (or [0.5, 2]): at most halve.
_GRADIENT_FLOOR = 0.5

ConcurrencyReason: TypeAlias = Literal[
    "rejected",  # 503 / refused: multiplicative cut
    "gradient",  # latency judged: the limit follows the gradient
    "not_saturated",  # fewer than half the leases in use: no growth
    "too_few_samples",  # not enough completed calls to judge
    "remeasure",  # the limit is pinned low to measure the minimum latency afresh
    "probing",  # pinned, waiting for a window measured at the pinned level
    "remeasured",  # the fresh minimum is in: the limit is restored
    "remeasure_timeout",  # too few calls while pinned: old minimum kept, limit restored
    "policy",  # the operator's box moved
    "frozen",
    "off",
]


@dataclass(frozen=True, slots=True)
class LatencyWindow:
    """What the fleet's calls to the downstream looked like since the last decision.

    Args:
        samples: calls completed (successfully) in the window.
        latency_ms: their recent latency (mean or median), ms.
        min_latency_ms: the fastest of them, ms.
        max_in_flight: the most calls in flight at once (leases held) in the window.
        rejected: calls refused outright (503, connection refused).
    """

    samples: int = 0
    latency_ms: float | None = None
    min_latency_ms: float | None = None
    max_in_flight: int = 0
    rejected: int = 0

    def __post_init__(self) -> None:
        for name in ("samples", "max_in_flight", "rejected"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("latency_ms", "min_latency_ms"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
        if self.samples and (self.latency_ms is None or self.min_latency_ms is None):
            raise ConfigurationError("a window with samples needs latency_ms and min_latency_ms")
        if (
            self.latency_ms is not None
            and self.min_latency_ms is not None
            and self.min_latency_ms > self.latency_ms
        ):
            raise ConfigurationError(
                f"min_latency_ms ({self.min_latency_ms!r}) exceeds latency_ms ({self.latency_ms!r})"
            )


@dataclass(frozen=True, slots=True)
class ConcurrencyState:
    """The controller's memory (kept in Redis fleet-wide).

    Args:
        limit: the fleet-wide limit, fractional (the gate applies ``floor``).
        min_latency_ms: the minimum latency, the "no queue" baseline, ms.
        measured_ms: when that minimum was last measured afresh (or lowered).
        probing_since_ms: set while the limit is pinned for a re-measurement.
        resume_limit: the limit to restore when the re-measurement ends.
        updated_ms: when the last decision was made.
    """

    limit: float
    min_latency_ms: float | None = None
    measured_ms: float | None = None
    probing_since_ms: float | None = None
    resume_limit: float | None = None
    updated_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("limit", "resume_limit"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 1):
                raise ConfigurationError(f"{name} must be a finite number >= 1, got {value!r}")
        if self.min_latency_ms is not None and not (
            math.isfinite(self.min_latency_ms) and self.min_latency_ms > 0
        ):
            raise ConfigurationError(
                f"min_latency_ms must be a finite number > 0, got {self.min_latency_ms!r}"
            )

    @property
    def concurrency(self) -> int:
        """The whole number of leases the gate grants."""
        return max(1, math.floor(self.limit))

    @property
    def probing(self) -> bool:
        """Whether the limit is pinned for a re-measurement."""
        return self.probing_since_ms is not None

    def as_dict(self) -> dict[str, float | None]:
        """Plain data for the store (and for ``from_dict``)."""
        return {
            "limit": self.limit,
            "min_latency_ms": self.min_latency_ms,
            "measured_ms": self.measured_ms,
            "probing_since_ms": self.probing_since_ms,
            "resume_limit": self.resume_limit,
            "updated_ms": self.updated_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConcurrencyState:
        """The inverse of :meth:`as_dict`; bad values raise ConfigurationError."""
        try:
            return cls(
                limit=float(data["limit"]),
                **{
                    name: None if data.get(name) is None else float(data[name])
                    for name in (
                        "min_latency_ms",
                        "measured_ms",
                        "probing_since_ms",
                        "resume_limit",
                        "updated_ms",
                    )
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"unreadable concurrency state {data!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ConcurrencyDecision:
    """One decision: the new state, the old one, why, and the gradient it used."""

    state: ConcurrencyState
    previous: ConcurrencyState
    reason: ConcurrencyReason
    gradient: float | None = None

    @property
    def changed(self) -> bool:
        """Whether the whole-number limit the gate applies moved (worth an event)."""
        return self.state.concurrency != self.previous.concurrency

    def event(self) -> dict[str, Any]:
        """The decision's log event fields (stable snake_case keys)."""
        floor = self.state.min_latency_ms
        return {
            "reason": self.reason,
            "concurrency": self.state.concurrency,
            "previous_concurrency": self.previous.concurrency,
            "limit": round(self.state.limit, 4),
            "gradient": None if self.gradient is None else round(self.gradient, 4),
            "min_latency_ms": None if floor is None else round(floor, 3),
        }


def initial_concurrency_state(
    policy: ConcurrencyPolicy, learned: ConcurrencyState | None = None
) -> ConcurrencyState:
    """Where a controller starts: the last learned state (inside the box), or the start."""
    if learned is None:
        return ConcurrencyState(limit=float(policy.initial_limit))
    return replace(learned, limit=_clamp(learned.limit, policy))


def _clamp(limit: float, policy: ConcurrencyPolicy) -> float:
    return max(float(policy.min_concurrency), min(limit, float(policy.max_concurrency)))


def decide_concurrency(
    state: ConcurrencyState,
    window: LatencyWindow,
    policy: ConcurrencyPolicy,
    *,
    now_ms: float,
    mode: Mode = "on",
) -> ConcurrencyDecision:
    """Decide the next fleet-wide concurrency limit from the latest latencies.

    Args:
        state: the controller's memory (see :func:`initial_concurrency_state`).
        window: the calls completed since ``state.updated_ms``.
        policy: the operator's box.
        now_ms: the current time on the fleet clock, in ms.
        mode: ``on`` decides; ``frozen`` and ``off`` keep the limit as it is.

    Example::

        >>> policy = ConcurrencyPolicy(max_concurrency=32, min_samples=1)
        >>> state = ConcurrencyState(limit=16.0, min_latency_ms=50.0, measured_ms=0.0)
        >>> slow = LatencyWindow(samples=20, latency_ms=300.0, min_latency_ms=200.0,
        ...                      max_in_flight=16)
        >>> decision = decide_concurrency(state, slow, policy, now_ms=1_000.0)
        >>> decision.reason, decision.gradient, decision.state.concurrency
        ('gradient', 0.5, 15)
    """
    if not math.isfinite(now_ms):
        raise ConfigurationError(f"now_ms must be finite, got {now_ms!r}")
    if mode != "on":
        return ConcurrencyDecision(replace(state, updated_ms=now_ms), state, mode)
    if state.probing:
        return _probe(state, window, policy, now_ms)
    floor, measured = state.min_latency_ms, state.measured_ms
    if window.min_latency_ms is not None and (floor is None or window.min_latency_ms < floor):
        floor, measured = window.min_latency_ms, now_ms
    known = replace(state, min_latency_ms=floor, measured_ms=measured, updated_ms=now_ms)

    def decided(
        limit: float, reason: ConcurrencyReason, gradient: float | None = None
    ) -> ConcurrencyDecision:
        return ConcurrencyDecision(
            replace(known, limit=_clamp(limit, policy)), state, reason, gradient
        )

    if window.rejected:
        return decided(state.limit * policy.backoff_factor, "rejected")
    if state.limit != _clamp(state.limit, policy):
        return decided(state.limit, "policy")
    due = measured is not None and now_ms - measured >= policy.remeasure_s * 1000.0
    if due and state.concurrency > policy.probe_limit:
        pinned = replace(
            known,
            limit=float(policy.probe_limit),
            probing_since_ms=now_ms,
            resume_limit=state.limit,
        )
        return ConcurrencyDecision(pinned, state, "remeasure")
    if window.samples < policy.min_samples or window.latency_ms is None or floor is None:
        return decided(state.limit, "too_few_samples")
    if due and window.max_in_flight <= policy.probe_limit:
        # Already as low as a probe would pin it: this window is the fresh measurement.
        assert window.min_latency_ms is not None
        floor = window.min_latency_ms
        known = replace(known, min_latency_ms=floor, measured_ms=now_ms)
    gradient = max(_GRADIENT_FLOOR, min(1.0, policy.tolerance * floor / window.latency_ms))
    headroom = math.sqrt(state.limit) if policy.headroom is None else policy.headroom
    target = state.limit * gradient + headroom
    if target > state.limit and window.max_in_flight * 2 < state.limit:
        return decided(state.limit, "not_saturated", gradient)
    smoothed = (1.0 - policy.smoothing) * state.limit + policy.smoothing * target
    return decided(smoothed, "gradient", gradient)


def _probe(
    state: ConcurrencyState, window: LatencyWindow, policy: ConcurrencyPolicy, now_ms: float
) -> ConcurrencyDecision:
    """While pinned: take the first window measured at the pinned level as the minimum."""
    assert state.probing_since_ms is not None
    resume = _clamp(state.resume_limit or state.limit, policy)
    ended = replace(state, probing_since_ms=None, resume_limit=None, updated_ms=now_ms)
    clean = window.samples >= policy.min_samples and window.max_in_flight <= policy.probe_limit
    if clean and window.min_latency_ms is not None:
        fresh = replace(
            ended, limit=resume, min_latency_ms=window.min_latency_ms, measured_ms=now_ms
        )
        return ConcurrencyDecision(fresh, state, "remeasured")
    if now_ms - state.probing_since_ms >= policy.probe_timeout_s * 1000.0:
        return ConcurrencyDecision(
            replace(ended, limit=resume, measured_ms=now_ms), state, "remeasure_timeout"
        )
    return ConcurrencyDecision(replace(state, updated_ms=now_ms), state, "probing")
