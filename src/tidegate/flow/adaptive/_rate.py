"""Rate discovery from rejections: AIMD under a ceiling, free of I/O.

Nobody tells the fleet the customs gateway's real capacity, and it moves (a
maintenance minute at 4/s in a 10/s day). So the rate is learned the way TCP learns a
window: grow by a small *additive* step while calls succeed and the gate is what
holds the fleet back, cut *multiplicatively* on a 429 or 503. A downstream that
suspends repeat offenders cannot be probed that way forever, so for it the controller
keeps a hard **ceiling** just below the rate at which the last 429 appeared, and raises
it only by a small factor, at most once per quiet period without any rejection (the
opposite of botocore's CUBIC, which deliberately overshoots the last throttle point).
Rate-limit headers short-cut all of it: the controller jumps to the advertised rate.

The probing itself (how far above the ceiling, how often, what a failed probe teaches)
is in :mod:`tidegate.flow.adaptive._probe`; the climb is multiplicative until the first
rejection (slow start) and, for a suspension-prone downstream, up to the ceiling —
additive only above what is known to work.

Everything here is a pure function of (state, window, policy, now): observations and
time are inputs, the new state and the reason are the output. The fleet-wide runner
(one elected controller per downstream) feeds it and applies the result; tests drive
it with an injected clock.

Guarantees, for any sequence of windows (property-tested):

* ``min_rate <= rate <= max_rate``;
* for a suspension-prone downstream, once a 429 was seen, ``rate <= ceiling``, and
  the ceiling a 429 sets lies below the rate the 429 appeared at (or at the floor);
* a 429 counts at the rate its call was admitted at (before the last raise, if it
  was admitted before it), and a clean window proves the rate before a raise made in
  the tick it covers, not the new one;
* a 429 of a call the gate admitted before the last cut (``throttled_admitted_ms``
  earlier than ``cut_ms``) is an echo of the rate before it: counted, named
  ``throttled_stale``, and nothing moves; so is a 503 (``unavailable_stale``).
  Reports without admission times fall back on the clock: 429s within ``settle_s``
  of a new ceiling only cut the rate;
* under a storm of 429s the rate never rises, and falls to the floor.

Why one module of ~400 lines: :func:`decide_rate` and its cases (the cut, the probe
or hold, the echoes, the clamps) are one decision over one state, and each case reads
what the others wrote into it; the probe's own maths already live apart.
"""

from __future__ import annotations

import math
from dataclasses import replace

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._policy import Mode, RatePolicy
from tidegate.flow.adaptive._probe import (
    at_waypoint,
    consecutive,
    converged,
    current_quiet_s,
    cut_waypoint,
    failed_probe,
    fallen_quiet_s,
    new_ceiling,
    quiet,
    start_probe,
)
from tidegate.flow.adaptive._rate_types import RateDecision, RateReason, RateState, RateWindow

__all__ = [
    "RateDecision",
    "RateReason",
    "RateState",
    "RateWindow",
    "decide_rate",
    "initial_rate_state",
]


def initial_rate_state(policy: RatePolicy, learned: RateState | None = None) -> RateState:
    """Where a controller starts: the last learned state, else the policy's start rate.

    A learned rate outside the operator's current box is brought inside it.
    """
    if learned is None:
        return RateState(rate=policy.initial_rate)
    return replace(learned, rate=_clamp(learned.rate, policy, learned.ceiling))


def _clamp(rate: float, policy: RatePolicy, ceiling: float | None) -> float:
    """Inside [min_rate, max_rate], and under the ceiling (which never undercuts the floor)."""
    top = policy.max_rate if ceiling is None else min(policy.max_rate, ceiling)
    return max(policy.min_rate, min(rate, top))


def _elapsed_s(state: RateState, policy: RatePolicy, now_ms: float) -> float:
    if state.updated_ms is None:
        return 0.0
    return max(0.0, min(policy.max_step_s, (now_ms - state.updated_ms) / 1000.0))


def decide_rate(
    state: RateState,
    window: RateWindow,
    policy: RatePolicy,
    *,
    now_ms: float,
    mode: Mode = "on",
) -> RateDecision:
    """Decide the next rate from what the fleet saw since the last decision.

    Args:
        state: the controller's memory (see :func:`initial_rate_state`).
        window: the observations since ``state.updated_ms``.
        policy: the operator's box.
        now_ms: the current time on the fleet clock, in ms.
        mode: ``on`` decides; ``frozen`` and ``off`` keep the state as it is.

    The rules, first match wins: 429s that all come from calls admitted before the
    last cut hold (an echo); a 429 or 503 cuts (to the advertised rate if the
    window's headers say less is left than the cut allows; a failed probe goes back
    to the ceiling before it); rate-limit headers set the rate; saturated success
    grows it once ``recover_s`` has passed since the last rejection (below the ceiling
    or before any rejection multiplicatively, above what worked additively, at the
    ceiling by a probe once the current quiet period is over); anything else holds.

    Example::

        >>> policy = RatePolicy(min_rate=1, max_rate=50, suspension_prone=True)
        >>> cut = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), policy,
        ...                   now_ms=0.0)
        >>> cut.reason, cut.state.rate, cut.state.ceiling
        ('throttled', 7.0, 9.0)
    """
    if not math.isfinite(now_ms):
        raise ConfigurationError(f"now_ms must be finite, got {now_ms!r}")
    if mode != "on":
        return RateDecision(replace(state, updated_ms=now_ms), state, mode)
    window_or_echo = _without_echoes(state, window, policy, now_ms)
    if isinstance(window_or_echo, RateDecision):
        return window_or_echo
    window = window_or_echo
    if window.throttled or window.unavailable:
        return _cut(state, window, policy, now_ms)
    ceiling = state.ceiling if policy.suspension_prone else None
    limit = policy.max_rate
    if window.hint is not None:
        advertised = _advertised(state, window.hint, policy, now_ms)
        if isinstance(advertised, RateDecision):
            return advertised
        limit = advertised
    top = limit if ceiling is None else min(limit, ceiling)
    if state.rate < policy.min_rate or state.rate > top:
        new = _clamp(state.rate, policy, ceiling)
        return _decision(state, new, ceiling, "policy", now_ms)
    if not (window.saturated and window.successes > 0):
        return _decision(state, state.rate, ceiling, "not_saturated", now_ms)
    # It went through cleanly — at the rate its calls were admitted at: the one before
    # the last raise if the last decision raised it (the slow start grows a whole
    # factor a tick, and a clean first window at the new rate proves nothing of it).
    proven = state.rate if state.raised_from is None else min(state.rate, state.raised_from)
    before, state = state, replace(state, good_rate=proven)
    recent = state.last_rejection_ms
    if recent is not None and now_ms - recent < policy.recover_s * 1000.0:
        return _decision(state, state.rate, ceiling, "recovering", now_ms, previous=before)
    if state.rate < top:
        grown = _grow(state, policy, ceiling, _elapsed_s(state, policy, now_ms))
        return _decision(state, min(top, grown), ceiling, "increase", now_ms, previous=before)
    if ceiling is None or ceiling >= limit:
        return _decision(state, state.rate, ceiling, "at_max", now_ms, previous=before)
    return _probe_or_hold(state, policy, ceiling, limit, now_ms=now_ms, previous=before)


def _probe_or_hold(
    state: RateState,
    policy: RatePolicy,
    ceiling: float,
    limit: float,
    *,
    now_ms: float,
    previous: RateState,
) -> RateDecision:
    """At the ceiling, saturated: probe above it once the wait is over, unless the
    ceiling is within the smallest probe of a recent 429 (:func:`converged`)."""
    hinted = limit < policy.max_rate  # headers said more than the ceiling allows
    if not quiet(state, policy, now_ms, at_least_s=policy.hinted_quiet_s if hinted else 0.0):
        return _decision(state, state.rate, ceiling, "at_ceiling", now_ms, previous=previous)
    state = at_waypoint(state, policy, ceiling, now_ms)
    if converged(state, policy, ceiling, now_ms):
        # A running probe went its proof time cleanly: it worked, and stays the ceiling.
        worked = state.probe_from is not None
        held = replace(state, probe_from=None, quiet_s=policy.quiet_s) if worked else state
        return _decision(held, state.rate, ceiling, "at_ceiling", now_ms, previous=previous)
    probed = start_probe(state, policy, ceiling, now_ms, limit=limit)
    return _decision(probed, state.rate, probed.ceiling, "reprobe", now_ms, previous=previous)


def _stale(count: int, admitted: float | None, cut: float | None) -> bool:
    """Every rejection of a kind (``count`` of them) came from a call admitted before
    the last cut (``admitted`` is the latest admission among them).

    The gate hands slots out ahead (to the workers waiting on it) at the rate in force,
    and answers come back after the next tick: the calls that drew a cut's 429 (or
    503) have company on the wire, and their answers land in the windows after the
    cut. They say the old rate was too high — already acted on — and nothing about
    the new one. Without admission times (``None``) every rejection counts, as before.
    """
    return count > 0 and admitted is not None and cut is not None and admitted < cut


def _without_echoes(
    state: RateState, window: RateWindow, policy: RatePolicy, now_ms: float
) -> RateWindow | RateDecision:
    """The window with its stale 429s and 503s set aside, or the decision to hold when
    they were all it had (a fresh rejection of either kind beside them is news)."""
    cut = state.cut_ms
    fresh = window
    if _stale(window.throttled, window.throttled_admitted_ms, cut):
        fresh = replace(fresh, throttled=0, throttled_admitted_ms=None)
    if _stale(window.unavailable, window.unavailable_admitted_ms, cut):
        fresh = replace(fresh, unavailable=0, unavailable_admitted_ms=None)
    if fresh is window or fresh.throttled or fresh.unavailable:
        return fresh
    ceiling = state.ceiling if policy.suspension_prone else None
    reason: RateReason = "throttled_stale" if window.throttled else "unavailable_stale"
    return _decision(state, state.rate, ceiling, reason, now_ms)


def _grow(state: RateState, policy: RatePolicy, ceiling: float | None, elapsed_s: float) -> float:
    """Multiplicative before any rejection (slow start) and up to a ceiling (a rate the
    downstream accepted); additive above what is known to work."""
    if ceiling is not None or state.last_rejection_ms is None:
        return state.rate * math.pow(1.0 + policy.growth_per_s, elapsed_s)
    return state.rate + policy.increase_per_s * elapsed_s


def _decision(
    state: RateState,
    rate: float,
    ceiling: float | None,
    reason: RateReason,
    now_ms: float,
    *,
    previous: RateState | None = None,
) -> RateDecision:
    """``state`` with the new rate and ceiling; ``previous`` is where the decision
    started (``state`` itself unless the caller already updated its memory)."""
    before = state if previous is None else previous
    cut_ms = state.cut_ms
    raised_from = before.rate if rate > before.rate else None
    if rate < before.rate:
        # The gate's GCRA already reserved the next slot at the old spacing: the first
        # call admitted after the cut still goes out there.
        cut_ms = now_ms + 1000.0 / before.rate
    return RateDecision(
        replace(
            state,
            rate=rate,
            ceiling=ceiling,
            updated_ms=now_ms,
            cut_ms=cut_ms,
            raised_from=raised_from,
        ),
        before,
        reason,
    )


def _admitted_rate(state: RateState, window: RateWindow) -> float:
    """The rate the latest refused call was admitted at: the one before the last raise
    when every 429 (and 503) came to a call admitted before it (``updated_ms`` is when
    the last decision raised the rate). A 429 is news about that rate, not the new one:
    the slow start grows a whole factor a tick, and a 429 to a call admitted before a
    raise put the ceiling and the probes' bound a factor too high."""
    raised_at, before = state.updated_ms, state.raised_from
    if raised_at is None or before is None:
        return state.rate
    stamps = [
        stamp
        for count, stamp in (
            (window.throttled, window.throttled_admitted_ms),
            (window.unavailable, window.unavailable_admitted_ms),
        )
        if count
    ]
    if stamps and all(stamp is not None and stamp < raised_at for stamp in stamps):
        return min(state.rate, before)
    return state.rate


def _cut(state: RateState, window: RateWindow, policy: RatePolicy, now_ms: float) -> RateDecision:
    """Multiplicative decrease from the rate the rejection happened at."""
    base = _admitted_rate(state, window)
    if window.sent_rate is not None and window.sent_rate > 0 and not window.saturated:
        base = min(base, window.sent_rate)
    reason: RateReason = "throttled" if window.throttled else "unavailable"
    advertised = window.hint.safe_rate if window.hint is not None else None
    probing = state.probe_from is not None and state.probe_from < base
    before = state
    if window.throttled == 1 and policy.suspension_prone and probing:
        state = failed_probe(state, policy, base, now_ms=now_ms)
        new = state.ceiling if state.ceiling is not None else base * policy.decrease_factor
        if advertised is not None:
            new = min(new, advertised * policy.headroom)
        new = _clamp(new, policy, state.ceiling)
        decided = _decision(state, new, state.ceiling, reason, now_ms, previous=before)
        stamped = replace(
            decided.state, last_rejection_ms=now_ms, ceiling_set_ms=now_ms, restored_ms=now_ms
        )
        return replace(decided, state=stamped)
    ceiling = state.ceiling if policy.suspension_prone else None
    ceiling_set = state.ceiling_set_ms
    # Without admission times an echo can only be guessed from the clock; with them,
    # _stale has already set the echoes aside and this 429 is news about the rate now.
    echo = (
        window.throttled_admitted_ms is None
        and ceiling is not None
        and ceiling_set is not None
        and now_ms - ceiling_set < policy.settle_s * 1000.0
    )
    if echo and state.restored_ms is not None and state.restored_ms == ceiling_set:
        # The echo of a failed probe (a slot reserved at the probe's spacing): the rate
        # is already back at one the downstream accepted for a whole quiet period.
        decided = _decision(state, state.rate, ceiling, reason, now_ms, previous=before)
        return replace(decided, state=replace(decided.state, last_rejection_ms=now_ms))
    factor = policy.decrease_factor
    # Three 429s in one window are a fall by more than a cut as surely as a second
    # 429 a tick later: at 25 → 8/s the tick after a ×0.9 cut drew the fifth 429.
    storm = window.throttled >= 3 and window.successes >= 1
    again = not echo and (consecutive(state, policy, now_ms) or storm)
    if again:
        factor *= policy.decrease_factor  # the last cut did not reach under the capacity
    new = min(state.rate, base * factor)
    # Headers that advertised less than was sent were right (the quota just fell):
    # they lead from here, and no ceiling is kept below them.
    believed = advertised is not None and base > advertised * policy.headroom
    if window.throttled and policy.suspension_prone and not echo and not believed:
        ceiling = new_ceiling(
            state, policy, base, max(policy.min_rate, new), consecutive=again, window=window
        )
        # One 429 at a rate that worked until now: the capacity moved a little, or a
        # burst ran out, and just under it is enough; a second 429 in a row cut deep.
        new = ceiling
        ceiling_set = now_ms
        top = base if state.ceiling is None else max(base, state.ceiling)
        fell = state.last_rejection_ms is not None and ceiling * policy.reprobe_factor < top
        point, point_bad = cut_waypoint(state, policy, ceiling, now_ms, again=again, fell=fell)
        state = replace(
            state,
            # A fall by more than a probe (not the slow start's overshoot): the capacity
            # moved down, and may come back; see _probe.converged.
            fell_ms=now_ms if fell else state.fell_ms,
            waypoint=point,
            waypoint_bad=point_bad,
            bad_rate=base,
            bad_ms=None,
            bad_ceiling=ceiling,
            probe_from=None,
            # A second cut of the same fall does not double the wait again (4 s to
            # 8 s to 16 s before the first probe, at a third of the capacity).
            quiet_s=(
                current_quiet_s(state, policy)
                if again or state.last_rejection_ms is None
                else fallen_quiet_s(state, policy)
            ),
            advertised_rate=advertised,
        )
    if advertised is not None:
        # The same answers said how much is left: go at least that low at once, rather
        # than one cut per tick while the downstream keeps counting offences.
        new = min(new, advertised * policy.headroom)
    new = _clamp(new, policy, ceiling)
    decided = _decision(
        replace(state, good_rate=None), new, ceiling, reason, now_ms, previous=before
    )
    stamped = replace(decided.state, last_rejection_ms=now_ms, ceiling_set_ms=ceiling_set)
    return replace(decided, state=stamped)


#: An advertised rate this much above the one a ceiling was set under has risen.
_RISE = 1.05


def _advertised(
    state: RateState, hint: RateLimitHint, policy: RatePolicy, now_ms: float
) -> RateDecision | float:
    """Follow what the downstream advertises, inside the box: down at once, up only
    once ``recover_s`` has passed since the last rejection.

    Returns the decision, or the limit the rest of the rules work under: the
    operator's maximum for a hint without a rate, the advertised rate when a
    suspension-prone downstream's ceiling (a 429 was met below the advertisement, as
    calls arrived with jitter against a small bucket) is under it — then it only caps
    the probes towards it.
    """
    ceiling = state.ceiling if policy.suspension_prone else None
    if hint.exhausted:
        decided = _decision(state, state.rate, ceiling, "advertised_exhausted", now_ms)
        return replace(decided, pause_s=hint.reset_s)
    safe = hint.safe_rate
    if safe is None:
        return float(policy.max_rate)
    target = max(policy.min_rate, min(policy.max_rate, safe * policy.headroom))
    if ceiling is not None and target > ceiling and target >= state.rate:
        was = state.advertised_rate
        if was is not None and safe > was * _RISE:
            # The quota went up since the ceiling was set under it (a maintenance window
            # ended): the ceiling keeps its fraction of the advertisement.
            raised = min(target, ceiling * safe / was)
            moved = replace(state, advertised_rate=safe)
            return _decision(moved, state.rate, raised, "advertised", now_ms, previous=state)
        return target
    recent = state.last_rejection_ms
    if recent is not None and now_ms - recent < policy.recover_s * 1000.0:
        # Down at once, up only after recover_s: a downstream that just refused at this
        # rate is not believed when its headers say more is fine (jitter, or a lie).
        target = max(policy.min_rate, min(target, state.rate))
    return _decision(state, _clamp(target, policy, ceiling), ceiling, "advertised", now_ms)
