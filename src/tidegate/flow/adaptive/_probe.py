"""Probing above a suspension-prone downstream's ceiling: how far, how often, what a 429 teaches.

A gateway that suspends repeat offenders can only be probed with single calls past
what it accepted, and every failed probe costs a 429 and the fleet's pause for its
``Retry-After``. So the probes are shaped like a search with memory rather than a
sawtooth:

* a probe raises the ceiling by ``reprobe_factor``, but only halfway to the rate of
  a recent 429 (``bad_rate``, forgotten after a hold and ``max_quiet_s`` more, or
  once probes climbed a whole factor above the ceiling it left) when the whole
  factor would come within the smallest probe of it, or ``min_reprobe_factor``
  above the ceiling if that is more — a bisection between what worked and what did
  not;
* a ceiling within that smallest step of the recent 429 has nothing left to bisect:
  it is held, so that failed probes cost at most ``probe_budget`` of the calls (see
  :func:`hold_s`), unless the capacity fell lately and may come back;
* a probe that runs ``quiet_s`` without a 429 *worked* (a small step must run
  longer: a bucket's burst hides a small excess for longer): the next one follows at once
  (a capacity that went up is found in a few factors, not one small step a minute:
  a whole factor when no recent 429 bounds it, and the bisection otherwise, which
  closes in from below at a steady capacity);
* after a fall (a maintenance window) the climb stops at the clean ceiling of before
  it (the *waypoint*), where the 429 met above it before the fall bounds the next
  probe's size again (not when it comes): the window usually gives back what it
  took, and a whole factor past it drew a 429 the ceiling before the fall knew of;
* a probe that draws a 429 puts the ceiling back where it was (a rate the downstream
  accepted for a whole quiet period) and doubles the wait before the next, up to
  ``max_quiet_s``: that bound is how long an increase of capacity can go unnoticed,
  and its inverse is the price paid in 429s at a capacity that did not move. Under
  the waypoint of a recent fall the wait stays ``2 × quiet_s`` and a 429 met more
  than a whole factor under the waypoint does not halve the next probe: the window
  is expected to end, and the climb back should not wait for it twice.

Pure functions of the state and the policy, like the rest of the rate maths.

Why one module of ~420 lines: the probe's size, its proof, the hold and the waypoint
are one search read together (each rule names the others' cases), and half the lines
are the measurements that chose each constant.
"""

from __future__ import annotations

import math
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

#: The longest hold of a converged ceiling, in ``max_quiet_s``: at 1.5/s the budget
#: alone would wait 133 s, and a capacity that came back after a maintenance window
#: would go unused that long (measured on the model: 3 → 1.5 → 3/s never reached 90 %
#: of the 3/s within 80 s). Below ``1 / (probe_budget × 3 × max_quiet_s)`` (3.3/s at
#: the defaults) the budget gives way to that goal.
_HOLDS = 3.0
#: The longest proof of a small probe, in ``quiet_s`` (see :func:`proof_s`). Measured
#: on the model with the delays of real processes: 5 (20 s) left a probe running when
#: the capacity fell and slowed every climb; 1 (no scaling) drew the second 429 at the
#: restored ceiling (settled 0.83 after the bench's dip instead of 0.93).
_PROOF_MAX = 2.0
#: How long after a fall the budget gives way (see :func:`_fell_lately`), in
#: ``max_quiet_s``: a minute's maintenance window at 25/s → 8/s, and the climb after
#: it bisecting towards the 429s met in it, took 39-42 s to 90 % with two holds (51 s).
_LATELY = 6.0
#: A 429 within this many calls at the last rate (or two ticks, if longer) of the last
#: rejection is a second in a row (see :func:`consecutive`). Measured on the model at
#: 3 → 1.5/s: two ticks alone let a fall's 429s come 3 s apart, each cut × 0.9, and the
#: fifth within 10 s suspended the fleet (1 of 24 seeds); 10 calls: none, and at or under
#: the new capacity within 3-5 s instead of 3-10 s; 15 or 25 calls cut the slow start
#: of a steady 3/s too deep (with 25, 0.97 → 0.87 of it used from 15 to 40 s). Above
#: 4/s two ticks are longer, and nothing changes.
_AGAIN_CALLS = 10.0

__all__ = [
    "at_waypoint",
    "consecutive",
    "converged",
    "current_quiet_s",
    "cut_waypoint",
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


def proof_s(state: RateState, policy: RatePolicy, now_ms: float) -> float:
    """How long a running probe must go without a 429 to have worked: ``quiet_s`` for a
    whole ``reprobe_factor``, longer for a smaller step (``quiet_s × (r - 1) / (step -
    1)``, at most ``max_quiet_s``). A token bucket's burst hides an excess of ``e``
    calls a second for ``burst / e`` seconds: 10.2/s against 10/s with a burst of 2
    runs clean for 10 s, and a probe taken for working after 4 s put the ceiling over
    the capacity, where it drew a second 429 a few seconds later. Scaled this way a
    burst of up to ``quiet_s × (r - 1)`` seconds of the capacity is seen through."""
    start, level = state.probe_from, state.ceiling
    if (
        start is None
        or level is None
        or level <= start
        or _fell_lately(state, policy, start, now_ms)
    ):
        return policy.quiet_s
    step = level / start - 1.0
    wait = policy.quiet_s * (policy.reprobe_factor - 1.0) / step
    return min(_PROOF_MAX * policy.quiet_s, max(policy.quiet_s, wait))


def quiet(state: RateState, policy: RatePolicy, now_ms: float, *, at_least_s: float = 0.0) -> bool:
    """Time for the next probe: a running probe went ``quiet_s`` without a rejection
    (it worked), or, between probes, the current wait (at least ``at_least_s``) has
    passed since the last rejection and the last probe."""
    if state.probe_from is not None:
        wait_s = proof_s(state, policy, now_ms)
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
    bad, at = state.bad_rate, _bad_since_ms(state)
    if bad is None or bad <= ceiling:
        return None
    below = state.bad_ceiling
    if below is not None and ceiling >= below * policy.reprobe_factor:
        return None  # probes climbed a whole factor since: the capacity moved up
    if at is None or now_ms - at >= _memory_s(policy, ceiling) * 1000.0:
        return None
    return bad


def _bad_since_ms(state: RateState) -> float | None:
    """When ``bad_rate`` started to bound the probes: its 429, or the climb's return
    to the waypoint (which brought the 429 met before the fall back)."""
    return state.last_rejection_ms if state.bad_ms is None else state.bad_ms


def hold_s(policy: RatePolicy, ceiling: float) -> float:
    """How long a converged ceiling waits after a 429 before it is probed again: the
    longest wait, or longer at a low rate, so that one failed probe per hold costs at
    most ``probe_budget`` of the calls (at 3/s one 429 per 20 s is 1.7 %)."""
    budgeted = 1.0 / (policy.probe_budget * ceiling)
    return max(policy.max_quiet_s, min(_HOLDS * policy.max_quiet_s, budgeted))


def _memory_s(policy: RatePolicy, ceiling: float) -> float:
    """How long a 429's rate bounds the probes: a hold and one longest wait more (two
    longest waits at 10/s, as before the hold scaled with the rate)."""
    return hold_s(policy, ceiling) + policy.max_quiet_s


def converged(state: RateState, policy: RatePolicy, ceiling: float, now_ms: float) -> bool:
    """The ceiling is within the smallest probe of a recent 429's rate: nothing is left
    to bisect. A probe there only finds whether a token bucket's burst hides the last
    few percent for ``quiet_s`` (it does: 10.2/s runs clean for 4 s against 10/s with a
    burst of 2), then draws two 429s — the probe's and, a few seconds after it was
    taken for working, one at the restored ceiling. So the ceiling is held for
    :func:`hold_s` after the last 429 (``max_quiet_s`` if the capacity fell lately).

    Back from a fall (``bad_ms``: the climb reached the waypoint and restored the 429
    of before the fall), for ``2 × quiet_s`` from that return only: the old 429 says
    where the capacity was, not that it came back no higher — held for
    ``max_quiet_s``, a capacity that came back at 12/s after a 10 → 4/s dip took 36 s
    to find; not held at all, every real run probed × 1.05 past that 429 at once and
    drew a 429 there."""
    bad = _bad_rate(state, policy, ceiling, now_ms)
    if bad is None or ceiling * policy.min_reprobe_factor < bad * (1.0 - 1e-9):
        return False
    at = state.last_rejection_ms
    if state.bad_ms is not None:
        at, hold = state.bad_ms, 2.0 * policy.quiet_s
    elif _fell_lately(state, policy, ceiling, now_ms):
        hold = policy.max_quiet_s
    else:
        hold = hold_s(policy, ceiling)
    return at is not None and now_ms - at < hold * 1000.0


def _waypoint(state: RateState, policy: RatePolicy, now_ms: float) -> float | None:
    """The clean ceiling before a recent fall, while the fall is recent."""
    point = state.waypoint
    if point is None or not _fell_lately(state, policy, point, now_ms):
        return None
    return point


def cut_waypoint(
    state: RateState, policy: RatePolicy, ceiling: float, now_ms: float, *, again: bool, fell: bool
) -> tuple[float | None, float | None]:
    """The waypoint (and its 429) a cut to ``ceiling`` leaves: the clean ceiling before
    the fall (the probe's start if one ran) and the recent 429 above it.

    A maintenance window usually gives back the capacity it took. Without the
    waypoint the climb after it went a whole factor past the ceiling of before the
    fall and drew a 429 there (real processes: 3.16 → 4.74 → 7.11 → 10.67/s, a 429,
    with a clean 9.96/s and a 429 at 10.95/s known from before the fall).

    A fall often shows only at its second cut (the first went ×0.9, or to the share
    accepted): so the first cut of every episode outside a recent fall records where
    it began (inert until a fall makes it count, see :func:`_waypoint`), a second cut
    keeps it, and within a recent fall the fall's waypoint stays until the climb
    reaches it."""
    # A fall whose first 429 came to a running probe was taken for a failed probe,
    # which records no waypoint: its second cut records one (the restored ceiling).
    after_probe = state.restored_ms is not None and state.restored_ms == state.last_rejection_ms
    if _fell_lately(state, policy, ceiling, now_ms):
        if state.waypoint is not None or not fell:
            return state.waypoint, state.waypoint_bad
    elif again and not (after_probe and state.waypoint is None):
        return state.waypoint, state.waypoint_bad
    clean = state.probe_from if state.probe_from is not None else state.ceiling
    if clean is None or clean <= ceiling:
        return None, None
    prior, failed = state.bad_before_probe, state.bad_rate
    small = failed is not None and failed < clean * math.sqrt(policy.reprobe_factor)
    if again and after_probe and small and prior is not None and prior > clean:
        # A small probe (under half a whole factor, geometrically) whose 429 came right
        # before a fall's: a bucket's burst hides a small excess for seconds, so that
        # 429 was the fall's, and the 429 that bounded the probe is the one to come
        # back to. Kept instead, the probe's rate (9.97/s, under a 10/s capacity) was
        # climbed past after the window, the bound was dropped, and the next probes
        # went × 1.5 to 14.95/s and 12.46/s: two 429s where one goes (7 of 24 seeds of
        # the bench schedule on the model of real processes). A whole factor that
        # failed found an excess (7.88 → 11.81/s against 10/s, 1.6 s before a dip, in
        # `tidegate demo --scenario adaptive`): its own rate stays the bound, not the
        # slow start's 17.7/s.
        return clean, prior
    return clean, _bad_rate(state, policy, clean, now_ms)


def at_waypoint(state: RateState, policy: RatePolicy, ceiling: float, now_ms: float) -> RateState:
    """A probe that worked at the waypoint: the climb is back where the fall began,
    and the 429 met above it before the fall bounds the next probe's size again (its
    memory counts from now), on the normal cadence — a capacity that came back higher
    is found by that probe working."""
    point = _waypoint(state, policy, now_ms)
    if state.probe_from is None or point is None or ceiling < point * (1.0 - 1e-9):
        return state
    return replace(
        state,
        waypoint=None,
        waypoint_bad=None,
        bad_rate=state.waypoint_bad,
        bad_ceiling=point,
        bad_ms=now_ms,
    )


def _fell_lately(state: RateState, policy: RatePolicy, ceiling: float, now_ms: float) -> bool:
    """The capacity fell by more than a probe within two holds (a maintenance window):
    it is likely to come back, and the goal is to notice within 30 s, so the 429
    budget gives way — the hold is ``max_quiet_s`` and a probe works after ``quiet_s``
    (the 429s met in the fall would otherwise be bisected towards one proof at a time
    after the capacity came back)."""
    fell = state.fell_ms
    lately_s = max(2.0 * hold_s(policy, ceiling), _LATELY * policy.max_quiet_s)
    return fell is not None and now_ms - fell < lately_s * 1000.0


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

    * the slow start's first 429: the rate last *proven* clean (``good_rate``: the
      rate before the last raise, whose calls' answers were all in; the slow start
      grows a whole factor a tick, so the 429 says only that the capacity lies between
      the two) — a tick's clean window at the newest rate proved nothing (answers come
      back up to a tick late, and a bucket's burst hides a small excess for a second),
      and a ceiling there drew the second 429 that cut deep and starved the start;
    * a 429 right after the previous cut's: well under the rate it is cut to
      (``× ceiling_margin × 0.8``: the capacity fell by more than a cut, by how much
      is unknown, and a ceiling left just above the fallen capacity draws no 429 for
      a minute against a bucket with a burst, but is over it all that time) — or
      under the rate the fall began at, when the first cut already went deeper;
    * a window where the downstream refused a large share (two or more 429s beside
      successes): ``base ×`` the share it accepted ``× ceiling_margin`` — what a
      bucket lets through at a rate above it is its own rate, so a fall to 40 % is
      met in one cut instead of two (each cut's 429s count towards a suspension).
    """
    ceiling = base * policy.ceiling_margin
    if consecutive:
        deep = cut
        began, last = state.bad_rate, state.ceiling
        if began is not None and last is not None and last < began * policy.ceiling_margin * 0.99:
            # The first cut already went deeper than the margin (to the share a window
            # accepted, 9.97 → 5.38/s at a fall to 4/s): deep under the rate the fall
            # began at, not ×0.35 under this one again (→ 1.9/s).
            deep = max(cut, began * policy.decrease_factor**2)
        ceiling = min(ceiling, deep * policy.ceiling_margin * _DEEPER)
    elif state.good_rate is not None and state.good_rate < ceiling:
        ceiling = state.good_rate
    if window is not None and window.throttled >= 2 and window.successes >= 1:
        share = window.successes / (window.successes + window.throttled)
        ceiling = min(ceiling, base * share * policy.ceiling_margin)
    if state.ceiling is not None:
        ceiling = min(ceiling, state.ceiling)
    return max(policy.min_rate, ceiling)


def consecutive(state: RateState, policy: RatePolicy, now_ms: float) -> bool:
    """A 429 right after the last rejection (within two ticks of a settled cut, or
    ``_AGAIN_CALLS`` calls at the rate the cut left, whichever is longer): the cut did
    not reach under the capacity, so the next one goes deeper. Counted in calls as well
    as seconds because a gateway counts offences per time window whatever the rate: at
    1.5/s a fall's 429s come seconds apart, not ticks."""
    at = state.last_rejection_ms
    window_s = max(policy.settle_s + 1.0, _AGAIN_CALLS / max(state.rate, 1e-9))
    return at is not None and now_ms - at <= window_s * 1000.0


def fallen_quiet_s(state: RateState, policy: RatePolicy) -> float:
    """The wait before probing after the capacity fell: doubled, so the first probe
    does not land among the fall's own 429s (which a gateway counts towards a
    suspension)."""
    return min(policy.max_quiet_s, current_quiet_s(state, policy) * 2.0)


def failed_probe(state: RateState, policy: RatePolicy, base: float, *, now_ms: float) -> RateState:
    """A 429 while a probe ran at ``base``: back to the ceiling before the probe.

    The wait before the next probe doubles (up to ``max_quiet_s``), except under the
    waypoint of a recent fall: there it is ``2 × quiet_s``, the fall's own first wait.
    A maintenance window usually ends, and a probe that met its last seconds is
    likely the last to fail: doubled, the wait left the capacity that came back unused
    for 16-20 s (the live loop, woken by the 429, on the model: 4 of 24 seeds took
    34-35 s to reach 90 % of the bench's 10/s after its dip; now 19 s at most).

    The 429 that bounded the probe is kept aside (``bad_before_probe``): if the next
    429 shows the capacity fell and the probe was a small one, the probe's 429 was the
    fall's, and the waypoint keeps the one kept aside (see :func:`cut_waypoint`).

    The caller checks ``state.probe_from < base`` (otherwise the capacity fell below
    what worked, and the 429 is handled as a fall, not as a failed probe).
    """
    assert state.probe_from is not None
    bad = base if state.bad_rate is None else min(state.bad_rate, base)
    if bad <= state.probe_from:
        bad = base
    point = _waypoint(state, policy, now_ms)
    if point is not None and state.probe_from < point:
        wait = min(policy.max_quiet_s, 2.0 * policy.quiet_s)
    else:
        wait = min(policy.max_quiet_s, current_quiet_s(state, policy) * 2.0)
    return replace(
        state,
        bad_before_probe=_bad_rate(state, policy, state.probe_from, now_ms),
        ceiling=max(policy.min_rate, state.probe_from),
        probe_from=None,
        quiet_s=wait,
        bad_rate=bad,
        bad_ms=None,
        bad_ceiling=max(policy.min_rate, state.probe_from),
        good_rate=None,
    )


def start_probe(
    state: RateState, policy: RatePolicy, ceiling: float, now_ms: float, *, limit: float
) -> RateState:
    """Raise the ceiling for a probe (the wait is over, the rate is at the ceiling).

    ``ceiling × reprobe_factor``, capped by ``limit`` (the operator's maximum, or an
    advertised rate); halfway to the rate of a recent 429 (but at least ``ceiling ×
    min_reprobe_factor``) when the whole factor would come within the smallest probe
    of it — there a probe learns nothing the 429 did not say, and the slow start's
    first probe went ×1.5 from 7.65/s to 11.47/s, 0.1 % under the 11.49/s that had
    just drawn its 429, and drew one in every real run. The same after a probe that
    worked: a whole factor from just under a recent 429 lands far above it, and its
    429s (two or three with slots handed out ahead) came just before a fall often
    enough to get the fleet suspended.

    After a fall, halfway only once the whole factor would reach a 429 met while the
    capacity was down: it bounds the climb towards a capacity that came back too
    tightly (halfway from within 5 % took four probes, 16 s, to clear 5.4/s after a
    10 → 4 → 10/s dip). For the same reason, more than a whole factor under the
    waypoint, a probe that worked goes on just past that 429 rather than halfway to
    it (bisecting from 3.96 towards a failed probe's 4.75/s took three more probes
    before the climb could go on). If a probe was running, it went through
    ``quiet_s`` cleanly: it worked, and the wait is back to ``quiet_s``.
    """
    worked = state.probe_from is not None
    wait = policy.quiet_s if worked else current_quiet_s(state, policy)
    bad = _bad_rate(state, policy, ceiling, now_ms)
    level = ceiling * policy.reprobe_factor
    # Met in the fall, a 429 may bound the climb too tightly: only the whole factor
    # reaching it halves the probe. The 429 of before the fall, restored at the waypoint
    # (``bad_ms``), is a bound like any other.
    in_fall = _fell_lately(state, policy, ceiling, now_ms) and state.bad_ms is None
    near = 1.0 if in_fall else policy.min_reprobe_factor
    point = _waypoint(state, policy, now_ms)
    # A failed probe more than a whole factor under the waypoint met the fall itself
    # (5.02/s against a 4/s window of a 10/s gateway): the next goes a whole factor
    # again, not halfway to it, or the capacity that came back is climbed to in steps
    # of a few percent.
    fall_only = (
        not worked and point is not None and bad is not None and bad * policy.reprobe_factor < point
    )
    if bad is not None and level * near >= bad and not fall_only:
        level = max(ceiling * policy.min_reprobe_factor, (ceiling + bad) / 2.0)
        if worked and point is not None and ceiling * policy.reprobe_factor < point:
            past = min(ceiling * policy.reprobe_factor, bad * policy.min_reprobe_factor)
            level = max(level, past)
    if point is not None and ceiling < point * (1.0 - 1e-9):
        level = min(level, point)  # back to where the fall began, then on from there
    return replace(
        state,
        ceiling=min(limit, level),
        probe_from=ceiling,
        quiet_s=wait,
        bad_rate=bad,
        last_reprobe_ms=now_ms,
    )
