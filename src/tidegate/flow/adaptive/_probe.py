"""Probing above a suspension-prone downstream's ceiling: how far, how often, what a 429 teaches.

A gateway that suspends repeat offenders can only be probed with single calls past
what it accepted, and every failed probe costs a 429 and the fleet's pause for its
``Retry-After``. So the probes are shaped like a search with memory rather than a
sawtooth:

* a probe raises the ceiling by ``reprobe_factor``, but only halfway to the rate of
  a recent 429 (``bad_rate``, forgotten after ``2 × max_quiet_s`` or once probes
  climbed a whole factor above the ceiling it left), or ``min_reprobe_factor`` above
  the ceiling if that is more — a bisection between what worked and what did not;
* a probe that runs ``quiet_s`` without a 429 *worked*: the next one follows at once
  (a capacity that went up is found in a few factors, not one small step a minute:
  a whole factor when no recent 429 bounds it, and the bisection otherwise, which
  closes in from below at a steady capacity);
* a probe that draws a 429 puts the ceiling back where it was (a rate the downstream
  accepted for a whole quiet period) and doubles the wait before the next, up to
  ``max_quiet_s``: that bound is how long an increase of capacity can go unnoticed,
  and its inverse is the price paid in 429s at a capacity that did not move.

Pure functions of the state and the policy, like the rest of the rate maths.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tidegate.flow.adaptive._policy import RatePolicy

if TYPE_CHECKING:
    from tidegate.flow.adaptive._rate_types import RateState, RateWindow

#: How much deeper than ``ceiling_margin`` the ceiling goes under the rate a second
#: 429 in a row is cut to (see :func:`new_ceiling`). Measured on the model with the
#: delays of real processes (``tidegate.sim._model``): 0.9 left the ceiling just above
#: a fall to 40 % (4.03-4.07/s for a 4/s dip); 0.78 slowed the climb back after it.
_DEEPER = 0.8

__all__ = [
    "consecutive",
    "current_quiet_s",
    "failed_probe",
    "fallen_quiet_s",
    "new_ceiling",
    "quiet",
    "start_probe",
]


def current_quiet_s(state: RateState, policy: RatePolicy) -> float:
    """The wait between probes now: doubled by each failed probe, within the policy's."""
    if state.quiet_s is None:
        return policy.quiet_s
    return min(policy.max_quiet_s, max(policy.quiet_s, state.quiet_s))


def quiet(state: RateState, policy: RatePolicy, now_ms: float, *, at_least_s: float = 0.0) -> bool:
    """Time for the next probe: a running probe went ``quiet_s`` without a rejection
    (it worked), or, between probes, the current wait (at least ``at_least_s``) has
    passed since the last rejection and the last probe."""
    if state.probe_from is not None:
        wait_s = policy.quiet_s
    else:
        wait_s = max(at_least_s, current_quiet_s(state, policy))
    quiet_ms = wait_s * 1000.0
    for at in (state.last_rejection_ms, state.last_reprobe_ms):
        if at is not None and now_ms - at < quiet_ms:
            return False
    return True


def _bad_rate(state: RateState, policy: RatePolicy, ceiling: float, now_ms: float) -> float | None:
    """The last 429's rate while it still says something: above the ceiling, met
    within two of the longest waits (so the failed probes of a steady capacity keep
    it), and not yet climbed past — probes that worked their way a whole
    ``reprobe_factor`` above the ceiling that 429 left found a capacity that moved up
    (a maintenance window ended), which that 429 knew nothing of."""
    bad, at = state.bad_rate, state.last_rejection_ms
    if bad is None or bad <= ceiling:
        return None
    below = state.bad_ceiling
    if below is not None and ceiling >= below * policy.reprobe_factor:
        return None  # probes climbed a whole factor since: the capacity moved up
    if at is None or now_ms - at >= 2.0 * policy.max_quiet_s * 1000.0:
        return None
    return bad


def new_ceiling(
    state: RateState,
    policy: RatePolicy,
    base: float,
    cut: float,
    *,
    consecutive: bool,
    window: RateWindow | None = None,
) -> float:
    """The ceiling a 429 at ``base`` calls per second sets (not during a probe).

    ``ceiling_margin × base``, or lower where the 429 says more:

    * the slow start's first 429: the rate of the last window that went through
      cleanly (the rate grows a whole factor per tick, so the 429 says only that the
      capacity lies between the two) — ``ceiling_margin ×`` that when the 429 came to
      a call admitted at it, before the last increase: one clean tick is weak evidence
      (a bucket's burst hides a small excess for a second, and answers come back up to
      a tick late), and that clean rate drew the second 429 that cut deep and starved
      the start;
    * a 429 right after the previous cut's: well under the rate it is cut to
      (``× ceiling_margin × 0.8``: the capacity fell by more than a cut, by how much
      is unknown, and a ceiling left just above the fallen capacity draws no 429 for
      a minute against a bucket with a burst, but is over it all that time);
    * a window where the downstream refused a large share (two or more 429s beside
      successes): ``base ×`` the share it accepted ``× ceiling_margin`` — what a
      bucket lets through at a rate above it is its own rate, so a fall to 40 % is
      met in one cut instead of two (each cut's 429s count towards a suspension).
    """
    ceiling = base * policy.ceiling_margin
    if consecutive:
        ceiling = min(ceiling, cut * policy.ceiling_margin * _DEEPER)
    elif state.good_rate is not None and state.good_rate < ceiling:
        ceiling = state.good_rate
        if _refused_at_good_rate(state, window):
            ceiling *= policy.ceiling_margin
    if window is not None and window.throttled >= 2 and window.successes >= 1:
        share = window.successes / (window.successes + window.throttled)
        ceiling = min(ceiling, base * share * policy.ceiling_margin)
    if state.ceiling is not None:
        ceiling = min(ceiling, state.ceiling)
    return max(policy.min_rate, ceiling)


def _refused_at_good_rate(state: RateState, window: RateWindow | None) -> bool:
    """The slow start's 429 came to a call admitted before the last increase, at the
    rate of the window that looked clean: that window's answers were not all in (they
    come back up to a tick late) or a bucket's burst hid a small excess for a second."""
    admitted = None if window is None else window.throttled_admitted_ms
    grown = state.updated_ms
    return (
        state.last_rejection_ms is None
        and admitted is not None
        and grown is not None
        and admitted < grown
    )


def consecutive(state: RateState, policy: RatePolicy, now_ms: float) -> bool:
    """A 429 right after the last rejection (within two ticks of a settled cut): the
    cut did not reach under the capacity, so the next one goes deeper."""
    at = state.last_rejection_ms
    return at is not None and now_ms - at <= (policy.settle_s + 1.0) * 1000.0


def fallen_quiet_s(state: RateState, policy: RatePolicy) -> float:
    """The wait before probing after the capacity fell: doubled, so the first probe
    does not land among the fall's own 429s (which a gateway counts towards a
    suspension)."""
    return min(policy.max_quiet_s, current_quiet_s(state, policy) * 2.0)


def failed_probe(state: RateState, policy: RatePolicy, base: float) -> RateState:
    """A 429 while a probe ran at ``base``: back to the ceiling before the probe.

    The caller checks ``state.probe_from < base`` (otherwise the capacity fell below
    what worked, and the 429 is handled as a fall, not as a failed probe).
    """
    assert state.probe_from is not None
    bad = base if state.bad_rate is None else min(state.bad_rate, base)
    if bad <= state.probe_from:
        bad = base
    return replace(
        state,
        ceiling=max(policy.min_rate, state.probe_from),
        probe_from=None,
        quiet_s=min(policy.max_quiet_s, current_quiet_s(state, policy) * 2.0),
        bad_rate=bad,
        bad_ceiling=max(policy.min_rate, state.probe_from),
        good_rate=None,
    )


def start_probe(
    state: RateState, policy: RatePolicy, ceiling: float, now_ms: float, *, limit: float
) -> RateState:
    """Raise the ceiling for a probe (the wait is over, the rate is at the ceiling).

    ``ceiling × reprobe_factor``; halfway to the rate of a recent 429 when that is
    lower (but at least ``ceiling × min_reprobe_factor``) — also right after a probe
    that worked: a whole factor from a probe that worked just under a recent 429 lands
    far above it, and its 429s (two or three with slots handed out ahead) came just
    before a fall often enough to get the fleet suspended; ``limit`` caps it (the
    operator's maximum, or an advertised rate). If a probe was running, it went
    through ``quiet_s`` cleanly: it worked, and the wait is back to ``quiet_s``.
    """
    worked = state.probe_from is not None
    wait = policy.quiet_s if worked else current_quiet_s(state, policy)
    bad = _bad_rate(state, policy, ceiling, now_ms)
    level = ceiling * policy.reprobe_factor
    if bad is not None and level >= bad:
        level = max(ceiling * policy.min_reprobe_factor, (ceiling + bad) / 2.0)
    return replace(
        state,
        ceiling=min(limit, level),
        probe_from=ceiling,
        quiet_s=wait,
        bad_rate=bad,
        last_reprobe_ms=now_ms,
    )
