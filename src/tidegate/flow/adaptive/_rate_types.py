"""The rate controller's values: what the fleet saw, what it remembers, what it decided.

Plain immutable data, checked at construction, shared by the maths in
:mod:`tidegate.flow.adaptive._rate` and :mod:`tidegate.flow.adaptive._probe` and stored
in Redis as plain data (``RateState.as_dict`` / ``from_dict``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._hint import RateLimitHint

__all__ = ["RateDecision", "RateReason", "RateState", "RateWindow"]

#: Why a decision came out as it did; the ``reason`` of its log event.
RateReason: TypeAlias = Literal[
    "throttled",  # a 429: multiplicative decrease (and a new ceiling if suspension-prone)
    "throttled_stale",  # only 429s of calls admitted before the last cut: nothing new
    "unavailable_stale",  # only 503s (and 429s) admitted before the last cut: the same
    "unavailable",  # a 503: multiplicative decrease, the ceiling untouched
    "advertised",  # rate-limit headers: straight to the advertised rate
    "advertised_exhausted",  # the headers say nothing is left: wait for the reset
    "increase",  # saturated and succeeding: additive increase
    "recovering",  # saturated, but a rejection is too recent to grow again
    "reprobe",  # at the ceiling after a quiet period: the ceiling is raised a little
    "at_ceiling",  # saturated, at the ceiling, still inside the quiet period
    "at_max",  # saturated at the operator's maximum
    "not_saturated",  # the gate is not the bottleneck: nothing to learn
    "policy",  # the operator's box moved: the rate is brought back inside it
    "frozen",  # the operator froze the controller
    "off",  # the controller is switched off
]


def _count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class RateWindow:
    """What the fleet saw since the previous decision.

    Args:
        successes: calls the downstream accepted.
        throttled: calls answered 429.
        unavailable: calls answered 503 (or refused, timed out).
        saturated: the gate held calls back (refused or delayed an admission): demand
            exceeded the live rate, so a higher rate would have been used.
        sent_rate: calls per second actually sent in the window, if measured. In an
            unsaturated window demand set the pace, so a rejection counts at this rate
            when it is below the live rate. In a saturated one the gate set it, and
            the measured rate is deflated by the pause that follows a 429 (the window
            sent at the live rate until the 429, then nothing): it is not used.
        hint: the latest rate-limit headers, if the downstream sends any.
        throttled_admitted_ms: when the gate admitted the *latest* of the throttled
            calls (fleet clock, ms); ``None`` when there was none or any of them came
            without its admission time. A call admitted before the last cut went out
            at the rate before it, so its 429 says nothing about the rate now.
        unavailable_admitted_ms: the same for the 503s (and refused calls): a 503 cut
            the rate too, and the calls already admitted draw their 503s after it.
    """

    successes: int = 0
    throttled: int = 0
    unavailable: int = 0
    saturated: bool = False
    sent_rate: float | None = None
    hint: RateLimitHint | None = None
    throttled_admitted_ms: float | None = None
    unavailable_admitted_ms: float | None = None

    def __post_init__(self) -> None:
        _count("successes", self.successes)
        _count("throttled", self.throttled)
        _count("unavailable", self.unavailable)
        if self.sent_rate is not None and not (
            math.isfinite(self.sent_rate) and self.sent_rate >= 0
        ):
            raise ConfigurationError(
                f"sent_rate must be a finite number >= 0 or None, got {self.sent_rate!r}"
            )
        for name in ("throttled_admitted_ms", "unavailable_admitted_ms"):
            stamp = getattr(self, name)
            if stamp is not None and not (
                isinstance(stamp, int | float)
                and not isinstance(stamp, bool)
                and math.isfinite(stamp)
            ):
                raise ConfigurationError(f"{name} must be a finite number or None, got {stamp!r}")


@dataclass(frozen=True, slots=True)
class RateState:
    """What the controller remembers between decisions (kept in Redis fleet-wide).

    Args:
        rate: the live rate, calls per second.
        ceiling: the hard cap learned from the last 429 (suspension-prone only).
        ceiling_set_ms: when a 429 last set the ceiling (its echoes do not move it).
        last_rejection_ms: when the last 429 or 503 was seen, ms on the fleet clock.
        last_reprobe_ms: when the ceiling was last raised.
        updated_ms: when the last decision was made.
        good_rate: the rate the last window that went through cleanly (saturated, no
            rejection) since the last rejection proved: the rate before a raise made
            in the tick that window covers (see ``raised_from``).
        bad_rate: the lowest rate a 429 appeared at since the capacity last moved up:
            probes stay below it until they are within the smallest step.
        probe_from: while a probe runs, the ceiling before it (restored on a 429).
        quiet_s: the current wait between probes (``None``: the policy's first).
        advertised_rate: the rate the headers advertised when a 429 set the ceiling
            under it (the ceiling follows it up when it rises).
        restored_ms: when a failed probe last put the ceiling back (its echoes hold).
        cut_ms: when a decision last lowered the rate: a call the gate admitted before
            it was spaced at the higher rate, and its 429 is an echo of that rate.
        bad_ceiling: the ceiling the 429 at ``bad_rate`` left: probes that worked their
            way a whole ``reprobe_factor`` above it show the capacity moved up since,
            and ``bad_rate`` no longer bounds them.
        raised_from: the rate before the last decision raised it (``None`` when the
            last decision did not raise it). The window after a raise holds the
            answers of calls admitted before it (slots handed out ahead, answers a tick
            late): it went through cleanly at this rate, not at the new one.
        fell_ms: when a 429 last cut the ceiling by more than a probe's factor (the
            capacity fell, as for a maintenance window, and may come back).
        waypoint: the clean ceiling before that fall (``None``: no fall lately, or the
            climb back reached it). A maintenance window usually gives back what it
            took: the climb after the fall stops there before probing above it.
        waypoint_bad: the recent 429's rate above ``waypoint`` before the fall
            (``None``: none bounded it); it bounds the probes again once the climb
            is back at the waypoint.
        bad_ms: when ``bad_rate`` last started to bound the probes, if not at the
            last rejection (the waypoint's 429, restored at the waypoint); ``None``:
            at ``last_rejection_ms``.
        bad_before_probe: the recent 429's rate that bounded the last failed probe,
            before the probe's own 429 took its place in ``bad_rate``. When a second
            429 right after shows the capacity fell and the probe was a small one, the
            probe's 429 was the fall's first, and this one is what the waypoint keeps.
    """

    rate: float
    ceiling: float | None = None
    ceiling_set_ms: float | None = None
    last_rejection_ms: float | None = None
    last_reprobe_ms: float | None = None
    updated_ms: float | None = None
    good_rate: float | None = None
    bad_rate: float | None = None
    probe_from: float | None = None
    quiet_s: float | None = None
    advertised_rate: float | None = None
    restored_ms: float | None = None
    cut_ms: float | None = None
    bad_ceiling: float | None = None
    raised_from: float | None = None
    fell_ms: float | None = None
    waypoint: float | None = None
    waypoint_bad: float | None = None
    bad_ms: float | None = None
    bad_before_probe: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ConfigurationError(f"rate must be a finite number > 0, got {self.rate!r}")
        if self.ceiling is not None and not (math.isfinite(self.ceiling) and self.ceiling > 0):
            raise ConfigurationError(
                f"ceiling must be a finite number > 0 or None, got {self.ceiling!r}"
            )

    def as_dict(self) -> dict[str, float | None]:
        """Plain data for the store (and for ``from_dict``)."""
        return {
            "rate": self.rate,
            "ceiling": self.ceiling,
            "ceiling_set_ms": self.ceiling_set_ms,
            "last_rejection_ms": self.last_rejection_ms,
            "last_reprobe_ms": self.last_reprobe_ms,
            "updated_ms": self.updated_ms,
            "good_rate": self.good_rate,
            "bad_rate": self.bad_rate,
            "probe_from": self.probe_from,
            "quiet_s": self.quiet_s,
            "advertised_rate": self.advertised_rate,
            "restored_ms": self.restored_ms,
            "cut_ms": self.cut_ms,
            "bad_ceiling": self.bad_ceiling,
            "raised_from": self.raised_from,
            "fell_ms": self.fell_ms,
            "waypoint": self.waypoint,
            "waypoint_bad": self.waypoint_bad,
            "bad_ms": self.bad_ms,
            "bad_before_probe": self.bad_before_probe,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RateState:
        """The inverse of :meth:`as_dict`; unknown keys are ignored, bad values raise."""
        try:
            return cls(
                rate=float(data["rate"]),
                ceiling=_opt_float(data.get("ceiling")),
                ceiling_set_ms=_opt_float(data.get("ceiling_set_ms")),
                last_rejection_ms=_opt_float(data.get("last_rejection_ms")),
                last_reprobe_ms=_opt_float(data.get("last_reprobe_ms")),
                updated_ms=_opt_float(data.get("updated_ms")),
                good_rate=_opt_float(data.get("good_rate")),
                bad_rate=_opt_float(data.get("bad_rate")),
                probe_from=_opt_float(data.get("probe_from")),
                quiet_s=_opt_float(data.get("quiet_s")),
                advertised_rate=_opt_float(data.get("advertised_rate")),
                restored_ms=_opt_float(data.get("restored_ms")),
                cut_ms=_opt_float(data.get("cut_ms")),
                bad_ceiling=_opt_float(data.get("bad_ceiling")),
                raised_from=_opt_float(data.get("raised_from")),
                fell_ms=_opt_float(data.get("fell_ms")),
                waypoint=_opt_float(data.get("waypoint")),
                waypoint_bad=_opt_float(data.get("waypoint_bad")),
                bad_ms=_opt_float(data.get("bad_ms")),
                bad_before_probe=_opt_float(data.get("bad_before_probe")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"unreadable rate state {data!r}: {exc}") from exc


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class RateDecision:
    """One decision: the new state, the old one, and why.

    Args:
        state: the state to store and the rate to apply.
        previous: the state the decision started from.
        reason: why (see :data:`RateReason`).
        pause_s: the downstream asked the fleet to wait this long (exhausted quota).
    """

    state: RateState
    previous: RateState
    reason: RateReason
    pause_s: float | None = None

    @property
    def changed(self) -> bool:
        """Whether the rate, the ceiling or a pause is to be applied (worth an event)."""
        return (
            self.state.rate != self.previous.rate
            or self.state.ceiling != self.previous.ceiling
            or self.pause_s is not None
        )

    def event(self) -> dict[str, Any]:
        """The decision's log event fields (stable snake_case keys, no payload)."""
        return {
            "reason": self.reason,
            "rate": round(self.state.rate, 6),
            "previous_rate": round(self.previous.rate, 6),
            "ceiling": None if self.state.ceiling is None else round(self.state.ceiling, 6),
            "previous_ceiling": (
                None if self.previous.ceiling is None else round(self.previous.ceiling, 6)
            ),
            "pause_s": self.pause_s,
        }
