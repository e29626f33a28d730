"""The rate controller's maths: properties over any window sequence, then scenarios.

Everything runs on an injected clock (``now_ms`` is an argument): no Redis, no sleeps.
The scenarios drive the controller against a fluid model of the downstream (each
1-second tick, a rate above the capacity is a 429) whose capacity follows a schedule
the controller is never told.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive import (
    RateDecision,
    RateLimitHint,
    RatePolicy,
    RateState,
    RateWindow,
    decide_rate,
    initial_rate_state,
)
from tidegate.sim._model import ModelRun, run_model

T0 = 1_700_000_000_000.0

policies = st.builds(
    lambda lo, span, step, cut, prone, margin, quiet, reprobe, headroom, recover, more: RatePolicy(
        min_rate=lo,
        max_rate=lo + span,
        increase_per_s=step,
        decrease_factor=cut,
        suspension_prone=prone,
        ceiling_margin=margin,
        quiet_s=quiet,
        max_quiet_s=quiet * more,
        reprobe_factor=reprobe,
        min_reprobe_factor=1.0 + (reprobe - 1.0) / 4.0,
        headroom=headroom,
        recover_s=recover,
    ),
    st.floats(0.1, 20),
    st.floats(0, 200),
    st.floats(0.01, 5),
    st.floats(0.1, 0.95),
    st.booleans(),
    st.floats(0.5, 0.99),
    st.floats(1, 300),
    st.floats(1.01, 2),
    st.floats(0.5, 1),
    st.sampled_from([0.0, 2.0, 10.0, 60.0]),
    st.sampled_from([1.0, 2.0, 5.0]),
)

hints = st.one_of(
    st.none(),
    st.builds(
        RateLimitHint,
        limit=st.one_of(st.none(), st.floats(0, 10_000)),
        window_s=st.one_of(st.none(), st.floats(0.5, 3_600)),
        remaining=st.one_of(st.none(), st.floats(0, 10_000)),
        reset_s=st.one_of(st.none(), st.floats(0, 3_600)),
    ),
)

windows = st.builds(
    RateWindow,
    successes=st.integers(0, 100),
    throttled=st.sampled_from([0, 0, 0, 1, 3]),
    unavailable=st.sampled_from([0, 0, 0, 0, 1]),
    saturated=st.booleans(),
    sent_rate=st.one_of(st.none(), st.floats(0, 300)),
    hint=hints,
    # Admission times around the run's clock (T0 plus up to 60 gaps of 30 s): before
    # and after any cut, or unknown.
    throttled_admitted_ms=st.one_of(st.none(), st.floats(T0 - 5_000, T0 + 1_800_000)),
    unavailable_admitted_ms=st.one_of(st.none(), st.floats(T0 - 5_000, T0 + 1_800_000)),
)

ticks = st.lists(st.tuples(st.floats(0, 30_000), windows), min_size=1, max_size=60)


def run(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]], start: RateState | None = None
) -> list[RateDecision]:
    state, now, decisions = start or initial_rate_state(policy), T0, []
    for gap_ms, window in steps:
        now += gap_ms
        decision = decide_rate(state, window, policy, now_ms=now)
        decisions.append(decision)
        state = decision.state
    return decisions


@given(policy=policies, steps=ticks)
@settings(max_examples=400, deadline=None)
def test_the_rate_never_leaves_the_operators_box(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]]
) -> None:
    """min_rate <= rate <= max_rate after every decision, whatever the fleet saw."""
    for decision in run(policy, steps):
        assert policy.min_rate <= decision.state.rate <= policy.max_rate


@given(policy=policies, steps=ticks)
@settings(max_examples=400, deadline=None)
def test_a_suspension_prone_downstream_is_never_sent_above_its_ceiling(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]]
) -> None:
    """Once a ceiling exists the rate stays under it; a 429 that moves the ceiling
    puts it below the rate the 429 appeared at (or at the floor); only a probe
    ("reprobe") or a rising advertisement ("advertised") raises it, and an echo (a
    429 within settle_s without admission times, or one admitted before the last cut)
    leaves it."""
    prone = RatePolicy(**{**_fields(policy), "suspension_prone": True})
    for (_, window), decision in zip(steps, run(prone, steps), strict=True):
        state, previous = decision.state, decision.previous
        moved = state.ceiling != previous.ceiling
        if decision.reason == "throttled" and moved and state.ceiling is not None:
            assert state.ceiling < previous.rate or state.ceiling == prone.min_rate
        if decision.reason == "throttled" and previous.ceiling is not None:
            assert state.ceiling is not None  # a 429 never forgets a ceiling
        if decision.reason == "throttled" and previous.ceiling_set_ms is not None:
            echo = state.updated_ms - previous.ceiling_set_ms < prone.settle_s * 1000  # type: ignore[operator]
            guessed = window.throttled_admitted_ms is None  # no admission time
            if echo and guessed and previous.probe_from is None:
                assert state.ceiling == previous.ceiling
        if decision.reason in ("throttled_stale", "unavailable_stale"):
            assert (state.rate, state.ceiling) == (previous.rate, previous.ceiling)
        raised = (
            state.ceiling is not None
            and previous.ceiling is not None
            and state.ceiling > previous.ceiling
        )
        if raised:
            assert decision.reason in {"reprobe", "advertised"}
        if state.ceiling is not None:
            assert state.rate <= state.ceiling + 1e-9


def _fields(policy: RatePolicy) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in policy.__dataclass_fields__}


@given(
    policy=policies,
    start=st.floats(0.1, 500),
    storm=st.lists(
        st.tuples(
            st.floats(0, 5_000),
            st.builds(
                RateWindow,
                successes=st.integers(0, 50),
                throttled=st.integers(1, 50),
                saturated=st.booleans(),
                sent_rate=st.one_of(st.none(), st.floats(0, 500)),
                hint=hints,
            ),
        ),
        min_size=1,
        max_size=80,
    ),
)
@settings(max_examples=400, deadline=None)
def test_a_429_storm_backs_off_monotonically_to_the_floor(
    policy: RatePolicy, start: float, storm: list[tuple[float, RateWindow]]
) -> None:
    """Every window holds a 429: the rate never rises, and enough of them reach the floor."""
    state = initial_rate_state(policy, RateState(rate=start))
    decisions = run(policy, storm, start=state)
    rates = [state.rate] + [d.state.rate for d in decisions]
    assert all(later <= earlier for earlier, later in itertools.pairwise(rates))
    assert all(d.reason == "throttled" for d in decisions)
    # A lone 429 on a suspension-prone downstream cuts to just under it (×margin).
    step = max(policy.decrease_factor, policy.ceiling_margin if policy.suspension_prone else 0)
    needed = math.ceil(math.log(policy.min_rate / state.rate) / math.log(step))
    if len(decisions) >= max(1, needed):
        assert rates[-1] == pytest.approx(policy.min_rate)


@given(
    policy=policies,
    start=st.floats(0.1, 500),
    storm=st.lists(
        st.tuples(
            st.floats(0, 5_000),
            st.builds(
                RateWindow,
                successes=st.integers(0, 50),
                throttled=st.integers(1, 50),
                saturated=st.booleans(),
                sent_rate=st.one_of(st.none(), st.floats(0, 500)),
                hint=hints,
                throttled_admitted_ms=st.one_of(st.none(), st.floats(T0 - 5_000, T0 + 400_000)),
            ),
        ),
        min_size=1,
        max_size=80,
    ),
)
@settings(max_examples=400, deadline=None)
def test_a_429_storm_with_admission_times_never_raises_the_rate(
    policy: RatePolicy, start: float, storm: list[tuple[float, RateWindow]]
) -> None:
    """Stamped 429s: an echo holds the rate, a fresh one cuts it — never up, and a
    window of echoes only is exactly one whose every call was admitted before the cut."""
    state = initial_rate_state(policy, RateState(rate=start))
    decisions = run(policy, storm, start=state)
    rates = [state.rate] + [d.state.rate for d in decisions]
    assert all(later <= earlier for earlier, later in itertools.pairwise(rates))
    for (_, window), decision in zip(storm, decisions, strict=True):
        assert decision.reason in {"throttled", "throttled_stale"}
        cut = decision.previous.cut_ms
        stale = window.throttled_admitted_ms is not None and cut is not None
        stale = stale and window.throttled_admitted_ms < cut  # type: ignore[operator]
        assert (decision.reason == "throttled_stale") == stale


@given(
    policy=policies,
    start=st.floats(0.1, 500),
    storm=st.lists(
        st.tuples(
            st.floats(0, 5_000),
            st.builds(
                RateWindow,
                successes=st.integers(0, 50),
                unavailable=st.integers(1, 50),
                saturated=st.booleans(),
                sent_rate=st.one_of(st.none(), st.floats(0, 500)),
                unavailable_admitted_ms=st.one_of(st.none(), st.floats(T0 - 5_000, T0 + 400_000)),
            ),
        ),
        min_size=1,
        max_size=80,
    ),
)
@settings(max_examples=300, deadline=None)
def test_a_503_storm_with_admission_times_never_raises_the_rate(
    policy: RatePolicy, start: float, storm: list[tuple[float, RateWindow]]
) -> None:
    """Stamped 503s, like stamped 429s: an echo holds, a fresh one cuts — never up, and
    a hold is exactly a window whose every 503 was admitted before the last cut."""
    state = initial_rate_state(policy, RateState(rate=start))
    decisions = run(policy, storm, start=state)
    rates = [state.rate] + [d.state.rate for d in decisions]
    assert all(later <= earlier for earlier, later in itertools.pairwise(rates))
    for (_, window), decision in zip(storm, decisions, strict=True):
        assert decision.reason in {"unavailable", "unavailable_stale"}
        cut = decision.previous.cut_ms
        stale = window.unavailable_admitted_ms is not None and cut is not None
        stale = stale and window.unavailable_admitted_ms < cut  # type: ignore[operator]
        assert (decision.reason == "unavailable_stale") == stale


@given(policy=policies, steps=ticks)
@settings(max_examples=200, deadline=None)
def test_the_ceiling_is_raised_at_most_once_per_quiet_period(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]]
) -> None:
    """Re-probes above the last 429 are spaced by quiet_s, and none follows a rejection
    sooner than quiet_s."""
    last_raise = last_rejection = None
    quiet_ms = policy.quiet_s * 1000
    for decision in run(policy, steps):
        now = decision.state.updated_ms
        assert now is not None
        if decision.reason == "reprobe":
            assert decision.state.ceiling is not None
            assert decision.previous.ceiling is not None
            assert decision.state.ceiling > decision.previous.ceiling
            assert last_raise is None or now - last_raise >= quiet_ms
            assert last_rejection is None or now - last_rejection >= quiet_ms
            last_raise = now
        if decision.reason in {"throttled", "unavailable"}:
            last_rejection = now


@given(policy=policies, steps=ticks)
@settings(max_examples=300, deadline=None)
def test_the_rate_never_grows_within_recover_s_of_a_rejection(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]]
) -> None:
    """Between a 429/503 and recover_s later, neither saturated success nor generous
    headers raise the rate."""
    last_rejection = None
    for decision in run(policy, steps):
        now = decision.state.updated_ms
        assert now is not None
        recovering = last_rejection is not None and now - last_rejection < policy.recover_s * 1000
        if decision.reason in {"increase", "reprobe"}:
            assert not recovering
        if decision.reason == "advertised" and recovering:
            assert decision.state.rate <= max(decision.previous.rate, policy.min_rate)
        if decision.reason in {"throttled", "unavailable"}:
            last_rejection = now


@given(policy=policies, steps=ticks, mode=st.sampled_from(["frozen", "off"]))
@settings(max_examples=100, deadline=None)
def test_frozen_or_off_keeps_the_learned_state(
    policy: RatePolicy, steps: list[tuple[float, RateWindow]], mode: Any
) -> None:
    """An operator's freeze holds the rate and ceiling whatever happens downstream."""
    state = RateState(rate=policy.max_rate, ceiling=policy.max_rate)
    for gap, window in steps:
        decision = decide_rate(state, window, policy, now_ms=T0 + gap, mode=mode)
        assert (decision.state.rate, decision.state.ceiling) == (state.rate, state.ceiling)
        assert decision.reason == mode
        assert not decision.changed


# -- examples ---------------------------------------------------------------------------

PRONE = RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True)
PLAIN = RatePolicy(min_rate=1.0, max_rate=50.0)
SATURATED = RateWindow(successes=9, saturated=True)


def test_a_lone_429_sets_the_ceiling_just_below_it_and_goes_there() -> None:
    """Suspension-prone: 429 at 10/s → ceiling and rate 9 (×0.9), the 429's rate kept
    as the bisection's upper end; plain AIMD cuts ×0.7 and keeps no ceiling."""
    prone = decide_rate(RateState(rate=10.0), RateWindow(throttled=2), PRONE, now_ms=T0)
    plain = decide_rate(RateState(rate=10.0), RateWindow(throttled=2), PLAIN, now_ms=T0)

    assert prone.reason == "throttled"
    assert (prone.state.rate, prone.state.ceiling) == (pytest.approx(9.0), pytest.approx(9.0))
    assert prone.state.bad_rate == 10.0
    assert prone.state.last_rejection_ms == T0
    assert prone.changed
    assert (plain.state.rate, plain.state.ceiling) == (pytest.approx(7.0), None)


def test_a_429_counts_at_the_rate_actually_sent() -> None:
    """The gate allowed 10/s but demand sent only 4/s: the 429 happened at 4/s."""
    window = RateWindow(throttled=1, sent_rate=4.0)
    decision = decide_rate(RateState(rate=10.0), window, PRONE, now_ms=T0)

    assert decision.state.rate == pytest.approx(3.6)
    assert decision.state.ceiling == pytest.approx(3.6)


def test_a_saturated_window_counts_the_429_at_the_gates_rate() -> None:
    """The gate held calls back at 10/s; the 429's pause cut the window's measured rate
    to 2/s: the 429 still happened at 10/s (ceiling 9, not 1.8)."""
    window = RateWindow(throttled=1, saturated=True, sent_rate=2.0)
    decision = decide_rate(RateState(rate=10.0), window, PRONE, now_ms=T0)

    assert decision.state.ceiling == pytest.approx(9.0)


def test_a_429_in_the_slow_start_sets_the_ceiling_at_the_last_clean_rate() -> None:
    """Growing ×1.5 a tick: clean at 6/s, 429 at 9/s — the capacity lies between, so
    the ceiling is 6, not 8.1."""
    state = RateState(rate=6.0, updated_ms=T0)
    clean = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 1_000)
    assert clean.state.rate == pytest.approx(9.0)
    refused = decide_rate(clean.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 2_000)

    assert refused.state.ceiling == pytest.approx(6.0)
    assert refused.state.rate == pytest.approx(6.0)


def test_a_second_429_in_a_row_cuts_deep_and_an_echo_keeps_the_ceiling() -> None:
    """429 at 10/s → 9/9. Another 1.5 s later: the capacity fell by more than a cut —
    ×0.49 to 4.41 and the ceiling well under that (× 0.9 × 0.8 = 3.18: at × 0.9 alone,
    3.97, the ceiling was left just above a fall to 40 % from 10.2/s). One 0.5 s later
    is an echo (within settle_s): cut once (×0.7), ceiling kept. One 5 s later is a
    lone 429 again → 8.1."""
    first = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), PRONE, now_ms=T0)
    again = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 1_500)
    echo = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 500)
    lone = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 5_000)

    assert (again.state.rate, again.state.ceiling) == (
        pytest.approx(3.1752),
        pytest.approx(3.1752),
    )
    assert (echo.state.rate, echo.state.ceiling) == (pytest.approx(6.3), pytest.approx(9.0))
    assert echo.state.ceiling_set_ms == T0
    assert (lone.state.rate, lone.state.ceiling) == (pytest.approx(8.1), pytest.approx(8.1))


def test_a_slow_start_429_at_the_clean_rate_sets_the_ceiling_under_it() -> None:
    """Clean at 6/s, grown to 9/s, then a 429 — of a call the gate admitted *before*
    the increase, at 6/s: that window only looked clean (its answers come back up to
    a tick late; a bucket's burst hides a small excess for a second). The ceiling goes
    under it (5.4), instead of to 6 — where, on real processes, the next 429 came at
    once and cut ×0.49 to a third of the capacity. Admitted after the increase, the
    429 is about 9/s, and 6 stands."""
    state = RateState(rate=6.0, updated_ms=T0)
    clean = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 1_000)
    assert clean.state.rate == pytest.approx(9.0)

    def refused(admitted_ms: float) -> RateDecision:
        window = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=admitted_ms)
        return decide_rate(clean.state, window, PRONE, now_ms=T0 + 2_000)

    assert refused(T0 + 800).state.ceiling == pytest.approx(5.4)
    assert refused(T0 + 1_300).state.ceiling == pytest.approx(6.0)


def test_a_second_cut_of_one_fall_keeps_the_first_cuts_wait() -> None:
    """A fall doubles the wait before probing (4 → 8 s); the second 429 in a row is the
    same fall, not another: the wait stays 8 s (it was 16 s, and the fleet sat at a
    third of the capacity that long after the start). A fall is a 429 after an
    earlier one (a minute ago here); the slow start's first keeps 4 s (below)."""
    settled = RateState(rate=10.0, last_rejection_ms=T0 - 60_000)
    first = decide_rate(settled, RateWindow(throttled=1), PRONE, now_ms=T0)
    again = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 1_500)

    assert first.state.quiet_s == 8.0
    assert again.state.quiet_s == 8.0
    assert again.state.ceiling is not None
    assert again.state.ceiling < first.state.ceiling * PRONE.decrease_factor


def test_a_window_mostly_refused_cuts_to_the_share_the_downstream_accepted() -> None:
    """At 10/s, 2 accepted and 3 refused in the window: a bucket lets its own rate
    through, so the capacity is about 4/s — the ceiling goes to 10 × 0.4 × 0.9 = 3.6
    at once (one cut, one batch of 429s), not to 9 and then again; three 429s also cut
    as deep as a second 429 in a row (10 × 0.49 × 0.72 = 3.53), the lower of the two.
    A lone 429, or 429s with no success beside them (the window of a pause), say
    nothing about the share."""
    state = RateState(rate=10.0)

    def cut(successes: int, throttled: int) -> float | None:
        window = RateWindow(successes=successes, throttled=throttled, saturated=True)
        return decide_rate(state, window, PRONE, now_ms=T0).state.ceiling

    assert cut(3, 2) == pytest.approx(10 * 0.6 * 0.9)
    assert cut(2, 3) == pytest.approx(10 * 0.7 * 0.7 * 0.9 * 0.8)
    assert cut(9, 1) == pytest.approx(9.0)
    assert cut(0, 3) == pytest.approx(9.0)


def test_after_a_probe_that_worked_the_next_bisects_towards_a_recent_429() -> None:
    """A probe from 8.5 to 9 held for its proof time (8 s for a step of 6 %); a 429 at
    10/s is recent: the next probe goes halfway (9.5), not a whole factor (13.5) —
    whose 429s came just before a fall often enough to get the fleet suspended. Once
    probes climbed a whole factor above the ceiling that 429 left, the capacity moved
    up: the 429 no longer bounds them."""
    running = RateState(
        rate=9.0,
        ceiling=9.0,
        probe_from=8.5,
        last_rejection_ms=T0,
        last_reprobe_ms=T0,
        updated_ms=T0 + 3_000,
        bad_rate=10.0,
        bad_ceiling=8.5,
    )
    worked = decide_rate(running, SATURATED, PRONE, now_ms=T0 + 8_000)
    climbed = decide_rate(
        replace(running, ceiling=13.0, rate=13.0, bad_rate=14.0),
        SATURATED,
        PRONE,
        now_ms=T0 + 4_000,
    )

    assert worked.reason == "reprobe"
    assert worked.state.ceiling == pytest.approx(9.5)
    assert climbed.reason == "reprobe"
    assert climbed.state.ceiling == pytest.approx(19.5)


def test_a_429_under_headers_that_say_less_follows_them_and_keeps_no_ceiling() -> None:
    """9.5/s, a 429 whose answer advertises 240 per minute: the quota fell and the
    headers said so — 3.8/s at once, and no ceiling below what they advertise."""
    hint = RateLimitHint(limit=240, window_s=60)
    decision = decide_rate(
        RateState(rate=9.5), RateWindow(throttled=2, hint=hint), PRONE, now_ms=T0
    )

    assert decision.reason == "throttled"
    assert decision.state.rate == pytest.approx(3.8)
    assert decision.state.ceiling is None


def test_a_429_never_raises_the_rate_to_a_generous_advertisement() -> None:
    """Headers claiming 50/s on a 429 at 9.5/s: they overstate, the ceiling goes under
    the 429 (8.55) and the rate with it."""
    hint = RateLimitHint(limit=50, window_s=1)
    decision = decide_rate(
        RateState(rate=9.5), RateWindow(throttled=1, hint=hint), PRONE, now_ms=T0
    )

    assert (decision.state.rate, decision.state.ceiling) == (
        pytest.approx(8.55),
        pytest.approx(8.55),
    )


def test_a_503_cuts_without_moving_the_ceiling() -> None:
    """An outage says nothing about the rate: cut, but keep the ceiling learned from 429s."""
    state = RateState(rate=8.0, ceiling=9.0)
    decision = decide_rate(state, RateWindow(unavailable=1), PRONE, now_ms=T0)

    assert decision.reason == "unavailable"
    assert decision.state.rate == pytest.approx(5.6)
    assert decision.state.ceiling == 9.0


def test_growth_is_multiplicative_below_a_ceiling_and_additive_above_what_worked() -> None:
    """Slow start ×1.5 a second (2 s: 3 → 6.75, and the credit is capped at
    max_step_s); up to a ceiling of 5 the same, stopping at it; a plain downstream
    after a rejection grows additively (0.1/s: 3 → 3.2)."""
    state = RateState(rate=3.0, updated_ms=T0)
    grown = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 2_000)
    capped = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 3_600_000)
    under = decide_rate(
        replace(state, ceiling=5.0, last_rejection_ms=T0 - 60_000),
        SATURATED,
        PRONE,
        now_ms=T0 + 2_000,
    )
    additive = decide_rate(
        replace(state, last_rejection_ms=T0 - 60_000), SATURATED, PLAIN, now_ms=T0 + 2_000
    )

    assert (grown.reason, grown.state.rate) == ("increase", pytest.approx(6.75))
    assert capped.state.rate == pytest.approx(6.75)
    assert under.state.rate == pytest.approx(5.0)
    assert additive.state.rate == pytest.approx(3.2)


def test_an_idle_gate_learns_nothing() -> None:
    """Calls succeed but the gate held nobody back: the rate stays."""
    state = RateState(rate=3.0, updated_ms=T0)
    decision = decide_rate(state, RateWindow(successes=3), PRONE, now_ms=T0 + 1_000)

    assert (decision.reason, decision.state.rate, decision.changed) == ("not_saturated", 3.0, False)


def test_at_the_ceiling_the_controller_waits_then_probes() -> None:
    """At the ceiling: hold while a 429 is recent; after quiet_s (4 s), ceiling × 1.5 —
    or, right after a failed probe, halfway to that 429's rate (9 → 9.5 under 10)."""
    state = RateState(rate=9.0, ceiling=9.0, last_rejection_ms=T0, updated_ms=T0)

    early = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 3_000)
    late = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 4_000)
    halfway = decide_rate(replace(state, bad_rate=10.0), SATURATED, PRONE, now_ms=T0 + 4_000)

    assert (early.reason, early.state.ceiling) == ("at_ceiling", 9.0)
    assert late.reason == "reprobe"
    assert late.state.ceiling == pytest.approx(13.5)
    assert late.state.rate == 9.0  # the rate climbs to it afterwards
    assert (late.state.probe_from, late.state.last_reprobe_ms) == (9.0, T0 + 4_000)
    assert (late.previous.ceiling, late.changed) == (9.0, True)
    assert halfway.state.ceiling == pytest.approx(9.5)


def test_the_first_probe_after_the_slow_start_does_not_land_on_its_429() -> None:
    """The slow start on real processes, ticks ~1.003 s apart: 7.65 → 11.49 → 17.27/s,
    a 429 to a call admitted at 11.49/s, the ceiling back to the proven 7.65/s. The
    first probe went ×1.5 to 11.47/s — 0.1 % under the rate that had just drawn the
    429, because ×1.5 fell a hair short of it and only a probe reaching the 429
    bisected — and drew a 429 in every run. Within the smallest probe of a 429 there
    is nothing to learn: it goes halfway (9.57/s)."""
    policy = PRONE
    state, now = initial_rate_state(policy), T0
    rates = []
    while state.rate < 17.0:
        now += 1_003.0
        state = decide_rate(state, SATURATED, policy, now_ms=now).state
        rates.append(state.rate)
    admitted_before_raise = now - 500.0
    now += 1_003.0
    cut = decide_rate(
        state,
        RateWindow(
            successes=8, throttled=1, saturated=True, throttled_admitted_ms=admitted_before_raise
        ),
        policy,
        now_ms=now,
    ).state
    probe = decide_rate(cut, SATURATED, policy, now_ms=now + policy.quiet_s * 1000.0)

    proven, bad = rates[-3], rates[-2]
    assert proven * policy.reprobe_factor < bad < proven * policy.reprobe_factor * 1.01
    assert (cut.ceiling, cut.bad_rate) == (pytest.approx(proven), pytest.approx(bad))
    assert probe.reason == "reprobe"
    assert probe.state.ceiling == pytest.approx((proven + bad) / 2.0)


def test_a_probe_that_holds_for_quiet_s_worked_and_the_next_follows() -> None:
    """Never refused again: probes every quiet_s (4 s), ×1.5 each, up to the maximum."""
    state = RateState(rate=9.0, ceiling=9.0, last_rejection_ms=T0, updated_ms=T0)
    reasons, ceilings = {}, []
    for second in range(1, 30):
        decision = decide_rate(state, SATURATED, PRONE, now_ms=T0 + second * 1000.0)
        reasons[second] = decision.reason
        if decision.reason == "reprobe":
            ceilings.append(decision.state.ceiling)
        state = decision.state

    assert [second for second, reason in reasons.items() if reason == "reprobe"] == [
        4,
        8,
        12,
        16,
        20,
    ]
    assert ceilings == pytest.approx([13.5, 20.25, 30.375, 45.5625, 50.0])
    assert reasons[29] == "at_max"


def test_a_failed_probe_goes_back_to_where_it_started_and_waits_twice_as_long() -> None:
    """Probing 9 → 9.5, a 429 at 9.5: ceiling and rate back to 9, 9.5 remembered as
    the upper end, the wait doubled (4 → 8 s)."""
    state = RateState(rate=9.0, ceiling=9.0, last_rejection_ms=T0, updated_ms=T0, bad_rate=10.0)
    probe = decide_rate(state, SATURATED, PRONE, now_ms=T0 + 4_000).state
    climbed = decide_rate(probe, SATURATED, PRONE, now_ms=T0 + 5_000).state
    assert climbed.rate == pytest.approx(9.5)

    failed = decide_rate(climbed, RateWindow(throttled=1), PRONE, now_ms=T0 + 6_000)

    assert (failed.state.rate, failed.state.ceiling) == (pytest.approx(9.0), pytest.approx(9.0))
    assert (failed.state.bad_rate, failed.state.quiet_s) == (pytest.approx(9.5), 8.0)
    assert failed.state.probe_from is None
    early = decide_rate(failed.state, SATURATED, PRONE, now_ms=T0 + 13_000)
    late = decide_rate(failed.state, SATURATED, PRONE, now_ms=T0 + 14_000)
    assert (early.reason, late.reason) == ("at_ceiling", "reprobe")
    assert late.state.ceiling == pytest.approx(9.45)  # ≥ ×1.05 even within 9.5


def test_headers_jump_straight_to_the_advertised_rate() -> None:
    """600 per 60 s advertised: from the 1/s floor to 9.5/s (95 %) in one decision."""
    hint = RateLimitHint(limit=600, window_s=60, remaining=600, reset_s=60)
    decision = decide_rate(RateState(rate=1.0), RateWindow(hint=hint), PRONE, now_ms=T0)

    assert decision.reason == "advertised"
    assert decision.state.rate == pytest.approx(9.5)


def test_an_exhausted_quota_asks_for_a_pause_until_the_reset() -> None:
    """remaining 0, reset in 12 s: the decision carries pause_s = 12 and keeps the rate."""
    hint = RateLimitHint(limit=100, window_s=60, remaining=0, reset_s=12)
    decision = decide_rate(RateState(rate=1.5), RateWindow(hint=hint), PRONE, now_ms=T0)

    assert (decision.reason, decision.pause_s, decision.state.rate) == (
        "advertised_exhausted",
        12,
        1.5,
    )
    assert decision.changed
    assert decision.event()["pause_s"] == 12


def test_headers_above_a_ceiling_only_cap_the_probes() -> None:
    """A 429 left the ceiling at 8.1 under headers claiming 20/s: the controller probes
    as without headers (8.1 × 1.5) but once per hinted_quiet_s (60 s), and a probe
    never passes what they advertise (9/s → 8.55)."""
    state = RateState(rate=8.1, ceiling=8.1, last_rejection_ms=T0, updated_ms=T0)
    generous = RateWindow(successes=8, saturated=True, hint=RateLimitHint(limit=20, window_s=1))
    tight = RateWindow(successes=8, saturated=True, hint=RateLimitHint(limit=9, window_s=1))

    soon = decide_rate(state, generous, PRONE, now_ms=T0 + 59_000)
    probe = decide_rate(state, generous, PRONE, now_ms=T0 + 60_000)
    capped = decide_rate(state, tight, PRONE, now_ms=T0 + 60_000)

    assert (soon.reason, soon.state.rate, soon.state.ceiling) == ("at_ceiling", 8.1, 8.1)
    assert (probe.reason, probe.state.ceiling) == ("reprobe", pytest.approx(12.15))
    assert capped.state.ceiling == pytest.approx(8.55)


def test_a_ceiling_under_headers_follows_them_up_when_the_quota_rises() -> None:
    """A 429 at 9.5/s under an advertised 10/s left the ceiling at 8.55; the quota
    then rises to 20/s: the ceiling keeps its fraction (17.1), at once."""
    hint = RateLimitHint(limit=600, window_s=60)
    cut = decide_rate(RateState(rate=9.5), RateWindow(throttled=1, hint=hint), PRONE, now_ms=T0)
    assert (cut.state.ceiling, cut.state.advertised_rate) == (pytest.approx(8.55), 10.0)
    risen = RateWindow(successes=8, saturated=True, hint=RateLimitHint(limit=1200, window_s=60))

    decision = decide_rate(cut.state, risen, PRONE, now_ms=T0 + 1_000)

    assert (decision.reason, decision.state.ceiling) == ("advertised", pytest.approx(17.1))


def test_headers_lift_the_rate_only_after_recover_s() -> None:
    """Cut to 3.8 by a 429 at T0: headers saying 9.5/s keep 3.8 for recover_s (2 s),
    then lift it; headers saying less lower it at once."""
    state = RateState(rate=3.8, last_rejection_ms=T0, updated_ms=T0)
    generous = RateWindow(hint=RateLimitHint(limit=600, window_s=60))
    meagre = RateWindow(hint=RateLimitHint(limit=120, window_s=60))

    early = decide_rate(state, generous, PRONE, now_ms=T0 + 1_000)
    later = decide_rate(state, generous, PRONE, now_ms=T0 + 2_000)
    lower = decide_rate(state, meagre, PRONE, now_ms=T0 + 1_000)

    assert early.state.rate == pytest.approx(3.8)
    assert later.state.rate == pytest.approx(9.5)
    assert lower.state.rate == pytest.approx(1.9)


def test_a_narrowed_box_brings_the_learned_rate_back_inside() -> None:
    """The operator lowers max_rate below the learned rate: reason "policy", rate = max."""
    narrow = RatePolicy(min_rate=1.0, max_rate=4.0)
    decision = decide_rate(RateState(rate=9.0), RateWindow(), narrow, now_ms=T0)

    assert (decision.reason, decision.state.rate) == ("policy", 4.0)


def test_a_controller_starts_from_the_learned_rate_inside_the_box() -> None:
    """No memory: the start rate (floor by default); a learned 80/s under max 50 → 50."""
    assert initial_rate_state(PRONE).rate == 1.0
    assert initial_rate_state(RatePolicy(min_rate=1, start_rate=3)).rate == 3.0
    assert initial_rate_state(PRONE, RateState(rate=80.0)).rate == 50.0
    assert initial_rate_state(PRONE, RateState(rate=20.0, ceiling=12.0)).rate == 12.0


def test_the_event_has_stable_keys() -> None:
    """One decision, one event: the reason and the before/after values, nothing else."""
    decision = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), PRONE, now_ms=T0)

    assert decision.event() == {
        "reason": "throttled",
        "rate": 9.0,
        "previous_rate": 10.0,
        "ceiling": 9.0,
        "previous_ceiling": None,
        "pause_s": None,
    }


def test_the_state_round_trips_through_plain_data() -> None:
    """as_dict → from_dict is the identity; garbage is a ConfigurationError."""
    state = RateState(
        rate=4.5,
        ceiling=6.0,
        ceiling_set_ms=T0,
        last_rejection_ms=T0,
        updated_ms=T0 + 1,
        good_rate=4.0,
        bad_rate=7.0,
        probe_from=5.0,
        quiet_s=8.0,
        raised_from=3.0,
        fell_ms=T0 - 5,
        waypoint=9.0,
        waypoint_bad=9.8,
        bad_ms=T0 - 2,
        bad_before_probe=10.4,
    )

    assert RateState.from_dict(state.as_dict()) == state
    assert RateState.from_dict({"rate": 2.0}) == RateState(rate=2.0)  # older records
    with pytest.raises(ConfigurationError):
        RateState.from_dict({"rate": "fast"})
    with pytest.raises(ConfigurationError):
        RateState.from_dict({"ceiling": 3})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_rate": 0},
        {"min_rate": -1},
        {"min_rate": math.nan},
        {"max_rate": math.inf},
        {"min_rate": 5, "max_rate": 4},
        {"start_rate": 500},
        {"increase_per_s": 0},
        {"decrease_factor": 1.0},
        {"decrease_factor": 0},
        {"ceiling_margin": 1.0},
        {"quiet_s": 0},
        {"settle_s": -1},
        {"reprobe_factor": 1.0},
        {"reprobe_factor": 3.0},
        {"headroom": 1.5},
        {"max_step_s": -1},
        {"suspension_prone": "yes"},
        {"min_rate": True},
        {"growth_per_s": 0},
        {"quiet_s": 30, "max_quiet_s": 10},
        {"min_reprobe_factor": 1.0},
        {"reprobe_factor": 1.2, "min_reprobe_factor": 1.3},
        {"probe_budget": 0},
        {"probe_budget": 1.5},
    ],
)
def test_nonsense_policies_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    """Every field is checked at construction, with the value in the message."""
    with pytest.raises(ConfigurationError):
        RatePolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"successes": -1}, {"throttled": 1.5}, {"unavailable": True}, {"sent_rate": math.inf}],
)
def test_nonsense_windows_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    """Observations are checked too: a negative count is a bug upstream, not a signal."""
    with pytest.raises(ConfigurationError):
        RateWindow(**kwargs)


def test_a_non_finite_clock_is_refused() -> None:
    """now_ms is an input; NaN would silently disable every time comparison."""
    with pytest.raises(ConfigurationError):
        decide_rate(RateState(rate=1.0), RateWindow(), PRONE, now_ms=math.nan)


# -- scenarios on the sans-I/O model (tidegate.sim._model) ---------------------------------

MAINTENANCE = [(120.0, 4.0), (180.0, 10.0)]  # 10/s, 4/s for a maintenance minute, 10/s


@pytest.mark.parametrize(
    ("capacity", "dip", "burst", "jitter_s"),
    [
        (10.0, 4.0, 1, 0.0),
        (10.0, 4.0, 2, 0.0),
        (10.0, 4.0, 2, 0.03),
        (10.0, 4.0, 5, 0.03),
        (25.0, 8.0, 1, 0.0),
        (25.0, 8.0, 2, 0.03),
    ],
    ids=str,
)
def test_scenario_meets_the_goals_through_a_maintenance_dip(
    capacity: float, dip: float, burst: int, jitter_s: float
) -> None:
    """Never told the capacity (e.g. 10/s, 4/s from 120 s to 180 s, then 10/s), no
    headers, a gateway that suspends after 5 429s in 10 s: no suspension, 429s <= 1 %
    of accepted calls, >= 90 % of the capacity used once converged, 90 % of it reached
    within 30 s of the start and of the increase, at or under the lower one within 5 s.

    Where the goals are not met (measured, not asserted): a burst of 3 at 10/s uses
    89.7-91 %; at 3/s one failed probe per ``max_quiet_s`` is 2.3-2.6 % of the calls
    (a longer ``max_quiet_s`` trades it for a slower discovery of an increase).
    """
    run_ = run_model(
        RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True),
        seconds=420,
        capacity=capacity,
        schedule=[(120.0, dip), (180.0, capacity)],
        burst=burst,
        jitter_s=jitter_s,
    )

    assert run_.suspensions == 0
    assert run_.throttled_share() <= 0.01
    assert run_.utilisation(40, 120) >= 0.9
    assert run_.utilisation(240, 420) >= 0.9
    assert (run_.reach_s(0) or math.inf) <= 30
    assert (run_.reach_s(180) or math.inf) <= 30
    assert (run_.under_s(120) or math.inf) <= 5


def test_scenario_a_fixed_gate_at_the_quota_is_suspended_in_the_dip() -> None:
    """The baseline the controller exists for: a gate fixed at the day's 10/s meets the
    maintenance minute at full speed and gets the fleet suspended."""
    fixed = run_model(None, fixed_rate=10.0, seconds=420, capacity=10.0, schedule=MAINTENANCE)

    assert fixed.suspensions >= 1


@pytest.mark.parametrize(("burst", "jitter_s"), [(1, 0.0), (2, 0.03)], ids=str)
def test_scenario_headers_reach_the_rate_with_no_429_at_all(burst: int, jitter_s: float) -> None:
    """The sim's X-RateLimit-Limit-Minute on every answer, capacity steady: straight
    to 95 % of it from the first answers, and not one 429."""
    run_ = run_model(
        PRONE, seconds=300, capacity=10.0, burst=burst, jitter_s=jitter_s, headers=True
    )

    assert sum(run_.throttled) == 0
    assert run_.utilisation(2, 300) >= 0.9


def test_scenario_headers_cost_one_429_when_the_quota_falls() -> None:
    """With the maintenance dip the header changes in the same instant as the bucket:
    the call already spaced for 10/s draws the one 429 nobody could avoid, the next
    decision follows the header down, and it climbs back with no 429."""
    run_ = run_model(PRONE, seconds=300, capacity=10.0, schedule=MAINTENANCE, headers=True)

    assert [t for t, n in enumerate(run_.throttled) if n] == [120]
    assert sum(run_.throttled) == 1
    assert (run_.reach_s(180) or math.inf) <= 2


def test_scenario_headers_against_jittered_arrivals_cost_few_429s() -> None:
    """Where headers still drew 429s: arrivals bunched by 30 ms of network jitter
    against a burst of 1 (95 % of the advertised rate leaves 5 ms of slack). That is
    no rate the headers can tell; the 429 sets a ceiling under the advertisement,
    probed towards it once a minute, and follows it up when the quota rises. At most
    one 429 per 40 s (the controller before this drew 10 in 300 s), no suspension."""
    run_ = run_model(
        PRONE,
        seconds=300,
        capacity=10.0,
        schedule=MAINTENANCE,
        burst=1,
        jitter_s=0.03,
        headers=True,
    )

    assert sum(run_.throttled) <= 300 // 40
    assert run_.suspensions == 0
    assert (run_.reach_s(180, fraction=0.7) or math.inf) <= 30


def test_scenario_headers_reach_a_fixed_window_quota_with_no_429_at_all() -> None:
    """A fixed-window quota of 600 per minute that says what is left: the controller
    follows the headers, finishes at the quota's pace and never draws a 429."""
    quota, window_s = 600, 60
    used: dict[int, float] = {}

    def advertise(after: int) -> RateLimitHint:
        """The headers of the last answer in second ``after - 1``: what is left now."""
        left = quota - used.get(after // window_s, 0.0)
        return RateLimitHint(
            limit=quota, window_s=window_s, remaining=left, reset_s=window_s - after % window_s
        )

    state, sent, throttled = initial_rate_state(PRONE), 0.0, 0
    for t in range(600):
        left = quota - used.get(t // window_s, 0.0)
        send = state.rate  # one second at the gate's rate
        if send > left + 1e-9:
            throttled += 1
        used[t // window_s] = used.get(t // window_s, 0.0) + min(send, left)
        sent += min(send, left)
        window = RateWindow(
            successes=math.floor(min(send, left)), saturated=True, hint=advertise(t + 1)
        )
        state = decide_rate(state, window, PRONE, now_ms=T0 + t * 1000.0).state

    assert throttled == 0
    assert sent >= 0.9 * quota * 600 / window_s  # within 10 % of the quota, from the floor


def test_the_adaptive_surface_is_sorted_and_complete() -> None:
    """`__all__` is sorted, every name exists, and classes and functions come from the
    package's private modules (or, for the key bundle, from the one keyspace)."""
    from tidegate.flow import adaptive

    names = adaptive.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        value = getattr(adaptive, name)
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")):
            module = value.__module__
            assert module.startswith("tidegate.flow.adaptive._") or module == "tidegate.keys"


# -- the echo: 429s of calls admitted before a cut, counted after it -----------------------


#: The delays of real processes, as the model takes them: gate slots handed out 0.4 s
#: ahead, answers up to 0.3 s late, 50 ms of arrival jitter, and the bench sim's burst of 2.
REAL_PROCESS_DELAYS: dict[str, Any] = {
    "burst": 2,
    "jitter_s": 0.05,
    "admit_lead_s": 0.4,
    "report_s": 0.3,
}


@pytest.mark.parametrize("seed", [0, 1, 6, 7])
def test_scenario_echoes_of_a_cut_do_not_cut_again(seed: int) -> None:
    """Real processes: the gate hands slots out 0.4 s ahead (four workers waiting at
    10/s), answers reach the window up to 0.3 s after the call, calls arrive with 50 ms
    of jitter. At the maintenance dip the calls already admitted at 10/s draw their
    429s after the first cut; counted as news they cut twice more (8.9, 6.2, 2.7/s)
    and the fleet was suspended in four of eight seeds. Stamped with their admission
    time they are echoes: one cut under the fall's first 429s, at most one more for
    the 429 of a call admitted after it, and the rate rests under the 4/s."""
    run_ = run_model(
        PRONE,
        seconds=420,
        capacity=10.0,
        schedule=MAINTENANCE,
        **REAL_PROCESS_DELAYS,
        seed=seed,
    )

    cuts = [rate for t, reason, rate in run_.decisions if reason == "throttled" and t >= 119]
    dip = run_.rate[120:180]
    assert run_.suspensions == 0
    assert run_.throttled_share() <= 0.01
    # One or two cuts (a window mostly refused is met in one); the unstamped run cuts
    # three times. The second goes well under the fall (× 0.35): 2.9-3.6/s here.
    assert len([t for t, r, _ in run_.decisions if r == "throttled" and 119 <= t < 130]) <= 2
    assert 0.7 * 4.0 <= min(dip) <= 4.0, cuts[:3]
    assert (run_.under_s(120) or math.inf) <= 5
    assert run_.utilisation(240, 420) >= 0.9
    assert (run_.reach_s(180) or math.inf) <= 30


#: The bench's schedule (``bench/adaptive_variants.py``): 10/s, 4/s from 40 s for 20 s.
BENCH_DIP = [(40.0, 4.0), (60.0, 10.0)]


def bench_run(seed: int, **model: Any) -> ModelRun:
    """``bench/adaptive.py``'s schedule (10/s, 4/s from 40 s for 20 s) for 150 s on the
    model, with the delays of real processes (``model``: more of :func:`run_model`'s
    options, such as ``wake_on_429``)."""
    return run_model(
        PRONE,
        seconds=150,
        capacity=10.0,
        schedule=BENCH_DIP,
        **REAL_PROCESS_DELAYS,
        seed=seed,
        **model,
    )


@pytest.mark.parametrize("seed", range(8))
def test_scenario_the_start_uses_the_capacity_on_real_processes(seed: int) -> None:
    """The delays of real processes (slots 0.4 s ahead, answers up to 0.3 s late),
    the bench's burst of 2: the slow start's 429 came at 17/s, the cut went to the
    last clean rate (11.4/s, over the 10/s: its window only looked clean), the next
    429 came within a tick and cut ×0.49 under a ceiling ×0.9 (5.0/s), and the first
    probe waited 16 s — 60 % of the capacity used from 15 to 40 s on every seed. Now
    the cut goes under a clean rate that drew the 429 itself, a second cut of one fall
    keeps the first's wait: >= 90 % on seven seeds of eight, no suspension, at most
    five 429s before the dip. (Seed 6 met the old sequence — its 429 was admitted
    after the increase, so nothing showed the clean rate was not — and used 70 %; since
    a clean window proves only the rate before a raise it uses 83 %.)"""
    run_ = bench_run(seed)

    assert run_.suspensions == 0
    assert sum(run_.throttled[:40]) <= 5
    assert run_.utilisation(15, 40) >= (0.65 if seed == 6 else 0.9)
    assert (run_.reach_s(0) or math.inf) <= 10
    assert (run_.under_s(40) or math.inf) <= 5


def test_scenario_a_fall_at_any_moment_on_real_processes() -> None:
    """The same, with the fall at 30, 35, … 55 s and six seeds each (36 runs): a
    probe's 429s just before the fall and the fall's own 429s can add up to the
    gateway's five in ten seconds. The controller as it was got 5 of the 36 runs
    suspended and used 53-71 % of the capacity before the fall; bisecting towards a
    recent 429 after a probe that worked (instead of a whole factor), the window's
    refused share and the deeper second cut bring it to at most 2 — not 0: with slots
    handed out 0.4 s ahead and the pause written up to 0.3 s late, a fall to 40 % from
    ~9.5/s costs three or four 429s by itself."""
    suspended, before = 0, []
    for at in (30.0, 35.0, 40.0, 45.0, 50.0, 55.0):
        for seed in range(6):
            run_ = run_model(
                PRONE,
                seconds=int(at) + 60,
                capacity=10.0,
                schedule=[(at, 4.0), (at + 20.0, 10.0)],
                **REAL_PROCESS_DELAYS,
                seed=seed,
            )
            suspended += run_.suspensions > 0
            before.append(run_.utilisation(15, int(at)))
            assert (run_.under_s(int(at)) or math.inf) <= 5

    assert suspended <= 2
    assert min(before) >= 0.85


def test_scenario_without_admission_times_the_echo_is_still_counted() -> None:
    """The same runs with reports that carry no admission time (an observer outside a
    gate slot): every 429 counts, as before — on most seeds the dip's echoes cut three
    times or more and under 3/s, which the stamped runs never do. This is the failure
    the stamps remove, kept visible in the model."""
    echoed = 0
    for seed in range(8):
        runs = {
            stamped: run_model(
                PRONE,
                seconds=240,
                capacity=10.0,
                schedule=MAINTENANCE,
                **REAL_PROCESS_DELAYS,
                seed=seed,
                stamped=stamped,
            )
            for stamped in (False, True)
        }
        cuts = {
            stamped: len([t for t, r, _ in run_.decisions if r == "throttled" and 119 <= t < 130])
            for stamped, run_ in runs.items()
        }
        echoed += cuts[False] >= 3 and min(runs[False].rate[120:180]) < 3.0
        assert cuts[True] <= 2
        assert min(runs[True].rate[120:180]) >= 0.7 * 4.0

    assert echoed >= 5


def _cut_at(rate: float, now: float) -> RateState:
    """The state right after a first 429 at ``rate`` (the ceiling set just under it)."""
    return decide_rate(RateState(rate=rate), RateWindow(throttled=1), PRONE, now_ms=now).state


def test_a_429_of_a_call_admitted_before_the_cut_is_stale() -> None:
    """Counted and named (``throttled_stale``), but neither the rate nor the ceiling
    moves, and no new rejection is stamped: the cut already answered it."""
    state = _cut_at(10.0, T0)
    echo = RateWindow(successes=3, throttled=2, saturated=True, throttled_admitted_ms=T0 - 300)

    decision = decide_rate(state, echo, PRONE, now_ms=T0 + 1_000)

    assert decision.reason == "throttled_stale"
    assert (decision.state.rate, decision.state.ceiling) == (state.rate, state.ceiling)
    assert decision.state.last_rejection_ms == state.last_rejection_ms
    assert not decision.changed


def test_the_first_call_admitted_after_a_cut_still_goes_at_the_old_spacing() -> None:
    """The gate's GCRA reserved the next slot at the old interval (100 ms at 10/s):
    a call admitted within it after the cut is an echo too; one after it is news."""
    state = _cut_at(10.0, T0)

    within = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=T0 + 60)
    after = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=T0 + 150)

    assert decide_rate(state, within, PRONE, now_ms=T0 + 1_000).reason == "throttled_stale"
    assert decide_rate(state, after, PRONE, now_ms=T0 + 1_000).reason == "throttled"


def test_a_fresh_429_right_after_a_cut_lowers_the_ceiling() -> None:
    """Admitted after the cut, at the new rate: the capacity is below it (a fall), so
    the ceiling goes under the new rate — where, without admission times, a 429 this
    soon is guessed to be an echo and the ceiling stays."""
    state = _cut_at(10.0, T0)
    assert state.ceiling == pytest.approx(9.0)

    fresh = decide_rate(
        state,
        RateWindow(throttled=1, saturated=True, throttled_admitted_ms=T0 + 500),
        PRONE,
        now_ms=T0 + 1_000,
    )
    guessed = decide_rate(state, RateWindow(throttled=1, saturated=True), PRONE, now_ms=T0 + 1_000)

    assert fresh.reason == "throttled"
    assert fresh.state.ceiling is not None
    assert fresh.state.ceiling < state.rate
    assert fresh.state.rate <= fresh.state.ceiling
    assert guessed.state.ceiling == state.ceiling
    assert guessed.state.rate < state.rate


def test_a_503_of_a_call_admitted_before_the_cut_is_stale() -> None:
    """Like a 429's: the cut already answered it — named ``unavailable_stale``, and
    neither the rate nor the ceiling moves; a fresh one (admitted after the cut and
    its old interval) cuts again."""
    state = decide_rate(RateState(rate=10.0), RateWindow(unavailable=1), PRONE, now_ms=T0).state
    stale = RateWindow(successes=3, unavailable=2, saturated=True, unavailable_admitted_ms=T0 - 300)
    fresh = RateWindow(successes=3, unavailable=1, saturated=True, unavailable_admitted_ms=T0 + 500)

    held = decide_rate(state, stale, PRONE, now_ms=T0 + 1_000)
    cut = decide_rate(state, fresh, PRONE, now_ms=T0 + 1_000)

    assert held.reason == "unavailable_stale"
    assert (held.state.rate, held.state.ceiling) == (state.rate, state.ceiling)
    assert held.state.last_rejection_ms == state.last_rejection_ms
    assert not held.changed
    assert cut.reason == "unavailable"
    assert cut.state.rate < state.rate


def test_stale_429s_beside_stale_503s_hold_and_a_fresh_one_beside_them_cuts() -> None:
    """Echoes of both kinds in one window: nothing new, hold. A fresh 429 beside stale
    503s is news, and it is judged as a 429 alone."""
    state = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), PRONE, now_ms=T0).state
    echoes = RateWindow(
        throttled=1,
        unavailable=1,
        throttled_admitted_ms=T0 - 100,
        unavailable_admitted_ms=T0 - 100,
    )
    mixed = replace(echoes, throttled_admitted_ms=T0 + 500)

    assert decide_rate(state, echoes, PRONE, now_ms=T0 + 1_000).reason == "throttled_stale"
    news = decide_rate(state, mixed, PRONE, now_ms=T0 + 1_000)
    assert news.reason == "throttled"
    assert news.state.rate < state.rate


def test_a_503_in_the_window_cuts_even_beside_stale_429s() -> None:
    """Only 429s are set aside by their admission time; unavailability is news."""
    state = _cut_at(10.0, T0)
    window = RateWindow(throttled=1, unavailable=1, throttled_admitted_ms=T0 - 300)

    decision = decide_rate(state, window, PRONE, now_ms=T0 + 1_000)

    assert decision.reason == "unavailable"
    assert decision.state.rate < state.rate


def test_the_cut_time_survives_the_store() -> None:
    """``cut_ms`` is part of the learned state, so a controller that takes over still
    knows which 429s are echoes."""
    state = _cut_at(10.0, T0)

    assert state.cut_ms == pytest.approx(T0 + 100.0)
    assert RateState.from_dict(state.as_dict()) == state


# -- evidence at the admission rate; converged ceilings; small probes (adaptive5) -----------


def test_a_clean_window_right_after_a_raise_proves_the_rate_before_it() -> None:
    """Raised 4 → 6/s at T0; the next window is clean, but its answers are of calls
    admitted at 4/s (slots handed out ahead, answers a tick late): it proves 4, not 6.
    The 429 that follows at 9/s sets the ceiling at 4 — at 6 (the old rule) the next
    429 came within a tick on real processes and cut to a third of the capacity."""
    raised = RateState(rate=6.0, updated_ms=T0, raised_from=4.0)
    clean = decide_rate(raised, SATURATED, PRONE, now_ms=T0 + 1_000)
    assert (clean.state.good_rate, clean.state.rate) == (4.0, pytest.approx(9.0))
    window = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=T0 + 1_300)

    refused = decide_rate(clean.state, window, PRONE, now_ms=T0 + 2_000)

    assert refused.state.ceiling == pytest.approx(4.0)
    # A window a whole tick after the raise proves the raised rate itself.
    held = decide_rate(replace(raised, raised_from=None), SATURATED, PRONE, now_ms=T0 + 1_000)
    assert held.state.good_rate == 6.0


def test_a_429_counts_at_the_rate_its_call_was_admitted_at() -> None:
    """Raised 6 → 9/s at T0, a 429 of a call admitted 0.2 s before: it says 6/s was too
    much, nothing of 9/s — the ceiling goes under 6 and 6 bounds the probes (it was
    9: the first probe went a factor too high). Admitted after the raise, it is 9's."""

    def refused(admitted_ms: float) -> RateState:
        state = RateState(rate=9.0, updated_ms=T0, raised_from=6.0, last_rejection_ms=T0 - 60_000)
        window = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=admitted_ms)
        return decide_rate(state, window, PRONE, now_ms=T0 + 1_000).state

    before, after = refused(T0 - 200), refused(T0 + 300)

    assert (before.bad_rate, before.ceiling) == (6.0, pytest.approx(5.4))
    assert (after.bad_rate, after.ceiling) == (9.0, pytest.approx(8.1))


def test_the_slow_starts_first_429_keeps_the_first_wait() -> None:
    """The first 429 ever is the slow start's overshoot, not a fall: the ceiling is a
    rate just proven clean, and the first probe comes after quiet_s (4 s), not 8."""
    first = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), PRONE, now_ms=T0)

    assert first.state.quiet_s == PRONE.quiet_s == 4.0


def test_a_small_probe_must_run_longer_to_have_worked() -> None:
    """A probe 8.5 → 9/s (6 %) is clean 4 s later — as 9/s would be against a 8.9/s
    bucket with a burst of 2 (the excess shows after 20 s). It has worked only after
    8 s (quiet_s × 0.5 / 0.06, at most twice quiet_s); a whole factor after 4 s."""
    running = RateState(
        rate=9.0,
        ceiling=9.0,
        probe_from=8.5,
        last_rejection_ms=T0 - 60_000,
        last_reprobe_ms=T0,
        updated_ms=T0 + 3_000,
    )

    early = decide_rate(running, SATURATED, PRONE, now_ms=T0 + 4_000)
    late = decide_rate(running, SATURATED, PRONE, now_ms=T0 + 8_000)
    whole = decide_rate(replace(running, probe_from=6.0), SATURATED, PRONE, now_ms=T0 + 4_000)

    assert (early.reason, early.state.probe_from) == ("at_ceiling", 8.5)
    assert (late.reason, late.state.probe_from) == ("reprobe", 9.0)
    assert whole.reason == "reprobe"


def test_a_ceiling_within_the_smallest_probe_of_a_429_is_held() -> None:
    """10.17/s under a 429 at 10.6/s (within 5 %): nothing left to bisect, and a probe
    there found only whether the burst hid the excess for 4 s — two 429s a cycle. It
    is held max_quiet_s (20 s) after the 429 at 10/s; at 3/s 60 s, so a failed probe
    per hold is at most ~0.5 % of the calls; after a fall (the capacity may come back)
    max_quiet_s again."""
    at_10 = RateState(
        rate=10.17, ceiling=10.17, bad_rate=10.6, last_rejection_ms=T0, updated_ms=T0 + 9_000
    )
    at_3 = replace(at_10, rate=3.04, ceiling=3.04, bad_rate=3.19)
    fallen = replace(at_3, fell_ms=T0 - 5_000)

    def reason(state: RateState, after_s: float) -> str:
        return decide_rate(state, SATURATED, PRONE, now_ms=T0 + after_s * 1000.0).reason

    assert (reason(at_10, 10), reason(at_10, 20)) == ("at_ceiling", "reprobe")
    assert (reason(at_3, 30), reason(at_3, 59), reason(at_3, 60)) == (
        "at_ceiling",
        "at_ceiling",
        "reprobe",
    )
    assert reason(fallen, 20) == "reprobe"


def test_two_429s_in_a_probe_window_are_a_fall_not_a_failed_probe() -> None:
    """Probing 9.23 → 9.74/s when the capacity falls to 4/s: three 429s beside six
    successes in one window. A failed probe would go back to 9.23 and draw the next
    tick's 429s there (a suspension on the model); a fall cuts to the share accepted.
    One 429 is still a failed probe."""
    probing = RateState(
        rate=9.74,
        ceiling=9.74,
        probe_from=9.23,
        last_rejection_ms=T0 - 30_000,
        last_reprobe_ms=T0 - 6_000,
        updated_ms=T0 - 1_000,
    )
    fall = RateWindow(throttled=3, successes=6, saturated=True)
    failed = RateWindow(throttled=1, successes=8, saturated=True)

    fell = decide_rate(probing, fall, PRONE, now_ms=T0).state
    back = decide_rate(probing, failed, PRONE, now_ms=T0).state

    assert fell.ceiling is not None
    assert fell.ceiling < 9.23 * PRONE.ceiling_margin
    assert fell.probe_from is None
    assert (back.ceiling, back.rate) == (pytest.approx(9.23), pytest.approx(9.23))


def test_a_second_429_after_a_deep_first_cut_cuts_under_where_the_fall_began() -> None:
    """9.97/s, a window mostly refused: the first cut goes to the share accepted
    (4.49). The next 429 is the same fall: ×0.35 under where it began (3.52), not
    ×0.35 under the first cut again (1.58 — under half of a 4/s dip)."""
    settled = RateState(rate=9.97, ceiling=9.97, last_rejection_ms=T0 - 60_000, updated_ms=T0 - 1)
    first = decide_rate(
        settled, RateWindow(throttled=2, successes=2, saturated=True), PRONE, now_ms=T0
    )
    assert first.state.ceiling == pytest.approx(9.97 * 0.5 * 0.9)
    window = RateWindow(throttled=1, saturated=True, throttled_admitted_ms=T0 + 500)

    again = decide_rate(first.state, window, PRONE, now_ms=T0 + 1_500)

    assert again.state.ceiling == pytest.approx(9.97 * 0.7 * 0.7 * 0.9 * 0.8)
    assert again.state.rate == again.state.ceiling


def test_scenario_the_bench_schedule_over_seeds_on_real_processes() -> None:
    """``bench/adaptive_variants.py``'s schedule (10/s, 4/s from 40 s for 20 s) with the
    delays of real processes, 24 seeds. Before: 429s 0.84-1.30 % (median 0.98), 0.69-0.93
    of the capacity from 15 to 40 s, 7-42 s to 90 % after the increase. Now no seed is
    suspended, the median 429 share is under 0.9 %, every seed uses >= 80 % before the
    dip and >= 85 % after it, and is back within 15 s of the increase."""
    shares = []
    for seed in range(24):
        run_ = bench_run(seed)
        shares.append(run_.throttled_share())
        assert run_.suspensions == 0
        assert run_.utilisation(15, 40) >= 0.8
        assert run_.utilisation(75, 150) >= 0.85
        assert (run_.reach_s(60) or math.inf) <= 15
        assert (run_.under_s(40) or math.inf) <= 5

    assert sorted(shares)[len(shares) // 2] <= 0.009
    assert max(shares) <= 0.011


@pytest.mark.parametrize(("capacity", "share", "used"), [(10.0, 0.0055, 0.95), (3.0, 0.015, 0.95)])
def test_scenario_a_steady_capacity_costs_few_failed_probes(
    capacity: float, share: float, used: float
) -> None:
    """A steady 10/s or 3/s for 300 s, the delays of real processes, 8 seeds. Before:
    each probe cycle drew two 429s (the probe's, and one at a restored ceiling that a
    bucket's burst had hidden for 4 s): 0.67-0.82 % at 10/s, 1.61-2.96 % at 3/s with 3
    of 8 runs suspended (one failed probe per 20 s is 1.7 % of 3/s). Now a small probe
    proves itself longer and a converged ceiling is held for the 429 budget."""
    for seed in range(8):
        run_ = run_model(
            PRONE,
            seconds=300,
            capacity=capacity,
            **REAL_PROCESS_DELAYS,
            seed=seed,
        )

        assert run_.suspensions == 0
        assert run_.throttled_share() <= share
        assert run_.utilisation(40, 300) >= used


def test_three_429s_in_one_window_cut_deep_at_once() -> None:
    """23.5/s when the capacity falls to 8/s: the first window holds three 429s beside
    the successes of calls sent before the fall. A cut to ×0.9 of the share accepted
    (14/s) drew the next tick's 429s — the fifth in ten seconds suspends the fleet (10
    of 24 model runs instead of 19) — so it cuts as deep as a second 429 in a row."""
    settled = RateState(rate=23.5, ceiling=23.5, last_rejection_ms=T0 - 60_000, updated_ms=T0 - 1)
    window = RateWindow(throttled=3, successes=17, saturated=True)

    fell = decide_rate(settled, window, PRONE, now_ms=T0).state

    assert fell.ceiling is not None
    assert fell.ceiling <= 23.5 * 0.7 * 0.7 * 0.9 * 0.8 + 1e-9
    assert fell.rate == fell.ceiling


def test_the_climb_after_a_fall_stops_at_the_ceiling_of_before_it() -> None:
    """Settled at 9.96/s under a 429 at 10.95/s, the capacity falls (two 429s beside
    two successes: a cut to 4.48/s). The climb back from 7.11/s went a whole factor
    to 10.67/s and drew a 429 there (real processes, 70 s); it now stops at 9.96, and
    once that probe has worked the 429 of before the fall bounds the next one
    (the smallest step towards 10.95, not × 1.5)."""
    settled = RateState(
        rate=9.96,
        ceiling=9.96,
        bad_rate=10.95,
        bad_ceiling=9.96,
        last_rejection_ms=T0 - 6_000,
        updated_ms=T0 - 1_000,
    )
    fall = RateWindow(throttled=2, successes=2, saturated=True)
    fell = decide_rate(settled, fall, PRONE, now_ms=T0).state
    assert fell.ceiling is not None
    assert fell.ceiling < 5.0
    back = replace(fell, rate=7.11, ceiling=7.11, last_rejection_ms=T0 + 1_000)

    probe = decide_rate(back, SATURATED, PRONE, now_ms=T0 + 30_000)
    climbed = decide_rate(probe.state, SATURATED, PRONE, now_ms=T0 + 31_000).state
    after = decide_rate(climbed, SATURATED, PRONE, now_ms=T0 + 35_000)

    assert (probe.reason, probe.state.ceiling) == ("reprobe", pytest.approx(9.96))
    assert (after.reason, after.state.ceiling) == ("reprobe", pytest.approx(9.96 * 1.05))


def test_past_the_waypoint_a_ceiling_next_to_the_429_of_before_the_fall_is_held() -> None:
    """Back at the waypoint (9.57/s) the probe towards the 429 of before the fall
    (10.53/s) went to 10.05 and worked. One more smallest step (× 1.05 = 10.55/s) is
    past that 429: every real-process run took it at once and drew a 429 there (78 s).
    It waits ``2 × quiet_s`` after the return to the waypoint instead — not the
    ``max_quiet_s`` of a settled ceiling: the capacity may have come back higher."""
    waypoint_ms = T0 - 4_000
    state = RateState(
        rate=10.05,
        ceiling=10.05,
        bad_rate=10.53,
        bad_ceiling=9.57,
        bad_ms=waypoint_ms,
        last_rejection_ms=T0 - 40_000,
        fell_ms=T0 - 36_000,
        updated_ms=T0 - 1_000,
    )
    quiet_ms = PRONE.quiet_s * 1000.0

    held = decide_rate(state, SATURATED, PRONE, now_ms=waypoint_ms + 2 * quiet_ms - 1_000)
    probed = decide_rate(state, SATURATED, PRONE, now_ms=waypoint_ms + 2 * quiet_ms + 1_000)

    assert held.state.ceiling == pytest.approx(10.05)
    assert held.reason != "reprobe"
    assert (probed.reason, probed.state.ceiling) == ("reprobe", pytest.approx(10.05 * 1.05))


def _a_probe_fails_then_the_capacity_falls(
    *, probe_from: float, level: float, bad: float, bad_ago_ms: float, fall_after_ms: float
) -> tuple[RateDecision, RateDecision]:
    """A probe from ``probe_from`` to ``level`` (under a 429 at ``bad``, ``bad_ago_ms``
    ago) draws a 429 at ``T0``; the capacity's fall draws the next ``fall_after_ms`` later."""
    failed = decide_rate(
        RateState(
            rate=level,
            ceiling=level,
            probe_from=probe_from,
            bad_rate=bad,
            bad_ceiling=probe_from,
            last_rejection_ms=T0 - bad_ago_ms,
            last_reprobe_ms=T0 - 2_600,
            updated_ms=T0 - 1_000,
        ),
        RateWindow(successes=8, throttled=1, saturated=True, throttled_admitted_ms=T0 - 500),
        PRONE,
        now_ms=T0,
    )
    fall = decide_rate(
        failed.state,
        RateWindow(
            successes=3,
            throttled=1,
            saturated=True,
            throttled_admitted_ms=T0 + fall_after_ms - 500,
        ),
        PRONE,
        now_ms=T0 + fall_after_ms,
    )
    return failed, fall


def test_a_fall_that_begins_at_a_running_probe_keeps_its_waypoint() -> None:
    """A probe from 9.49 to 9.97/s runs when the capacity falls to 4/s: its 429 is taken
    for a failed probe (the ceiling back to 9.49, no cut of a fall, so no waypoint), and
    the next 429, two seconds later, cuts deep — as the second cut of a fall it kept the
    waypoint the first had recorded, which was none. The climb after the window then
    bisected towards the fall's own 429s instead of going back to 9.49 (the model at
    9.85/s: 41 s to 90 % after the rise in 5 of 12 seeds). That second cut records the
    waypoint: the restored ceiling, and the 429 that bounded the probe (10.44/s). The
    probe's own 429 was the fall's first and says nothing of 9.97/s: kept as the
    waypoint's 429, it was climbed past after the window (the capacity was 10/s), and
    the next probes went a whole factor, to 14.95 and 12.46/s, drawing two 429s."""
    failed, fall = _a_probe_fails_then_the_capacity_falls(
        probe_from=9.49, level=9.97, bad=10.44, bad_ago_ms=20_000, fall_after_ms=2_000
    )

    assert failed.state.ceiling == pytest.approx(9.49)
    assert failed.state.waypoint is None
    assert fall.state.ceiling is not None
    assert fall.state.ceiling < 5.0
    assert failed.state.bad_rate == pytest.approx(9.97)
    assert failed.state.bad_before_probe == pytest.approx(10.44)
    assert fall.state.waypoint == pytest.approx(9.49)
    assert fall.state.waypoint_bad == pytest.approx(10.44)


def test_a_whole_factor_that_failed_just_before_a_fall_stays_the_waypoints_429() -> None:
    """``tidegate demo --scenario adaptive`` on real processes: the first probe after
    the slow start went × 1.5 from 7.88 to 11.81/s against a 10/s gateway and drew a
    429; 1.6 s later the maintenance window's first 429 came. Taken for the fall's
    first (as a small probe's is), the probe's 429 gave way to the slow start's 17.7/s,
    and back at the waypoint the climb went × 1.5 to 11.81/s again and drew the same
    429. A whole factor that failed found an excess: its own rate stays the bound."""
    failed, fall = _a_probe_fails_then_the_capacity_falls(
        probe_from=7.88, level=11.81, bad=17.7, bad_ago_ms=8_000, fall_after_ms=1_600
    )

    assert failed.state.bad_before_probe == pytest.approx(17.7)
    assert fall.state.waypoint == pytest.approx(7.88)
    assert fall.state.waypoint_bad == pytest.approx(11.81)


def test_far_under_the_waypoint_a_probe_that_worked_goes_past_the_failed_probe_of_the_fall() -> (
    None
):
    """In the 4/s window a probe from 3.16 to 4.75/s failed; after it a probe to 3.96
    worked, far under the waypoint (9.97/s, the clean ceiling before the fall). Bisecting
    on towards 4.75 took three more probes of 4 s each (4.35, 4.57, 4.80) before the
    climb could go a whole factor: 31 s to 90 % of a capacity that came back at 10/s
    (the model, seed 1, with the pause written 20 ms after the 429). The 429 was met
    while the capacity was down; the next probe goes just past it (× 1.05). Within a
    whole factor of the waypoint the bisection stays: there it is the search for a
    steady capacity (a slow start's overshoot looks like a fall too)."""
    state = RateState(
        rate=3.96,
        ceiling=3.96,
        probe_from=3.16,
        bad_rate=4.75,
        bad_ceiling=3.16,
        waypoint=9.97,
        waypoint_bad=10.44,
        fell_ms=T0 - 30_000,
        last_rejection_ms=T0 - 16_000,
        last_reprobe_ms=T0 - 4_000,
        updated_ms=T0 - 1_000,
    )
    near = replace(state, waypoint=5.5, waypoint_bad=5.9)

    far_probe = decide_rate(state, SATURATED, PRONE, now_ms=T0)
    near_probe = decide_rate(near, SATURATED, PRONE, now_ms=T0)

    assert (far_probe.reason, far_probe.state.ceiling) == ("reprobe", pytest.approx(4.75 * 1.05))
    assert (near_probe.reason, near_probe.state.ceiling) == (
        "reprobe",
        pytest.approx((3.96 + 4.75) / 2),
    )


def _in_a_fall(**fields: Any) -> RateState:
    """Probing 3.35 → 5.02/s in a 4/s window of a 10/s gateway: the fall 20 s ago
    left the waypoint at 9.49 (the clean ceiling before it), the wait at 16 s."""
    state = RateState(
        rate=5.02,
        ceiling=5.02,
        probe_from=3.35,
        waypoint=9.49,
        waypoint_bad=9.97,
        fell_ms=T0 - 20_000,
        quiet_s=16.0,
        last_rejection_ms=T0 - 19_000,
        last_reprobe_ms=T0 - 2_000,
        updated_ms=T0 - 1_000,
    )
    return replace(state, **fields)


def test_a_probe_failed_under_the_waypoint_of_a_fall_waits_the_falls_wait_not_twice_as_long() -> (
    None
):
    """The probe that met the window's last seconds: back to 3.35, the next probe after
    2 × quiet_s (8 s), not 32 s capped at max_quiet_s (20 s) — on the model of the live
    loop, a capacity back at 10/s waited that long on 4 of 24 seeds (34-35 s to 90 %).
    Above the waypoint (no fall to come back from) the wait doubles as before."""
    failed = decide_rate(_in_a_fall(), RateWindow(throttled=1), PRONE, now_ms=T0)
    steady = decide_rate(
        _in_a_fall(rate=10.4, ceiling=10.4, probe_from=9.9, bad_rate=10.9),
        RateWindow(throttled=1),
        PRONE,
        now_ms=T0,
    )

    assert (failed.state.ceiling, failed.state.quiet_s) == (pytest.approx(3.35), 8.0)
    assert (steady.state.ceiling, steady.state.quiet_s) == (pytest.approx(9.9), 20.0)


def test_back_at_the_waypoint_the_next_probe_does_not_repeat_the_429_of_before_the_fall() -> None:
    """``tidegate demo --scenario adaptive`` on real processes: the slow start's clean
    rate was 7.7/s, its first probe went × 1.5 to 11.7/s and drew a 429, and the window
    (4/s from 20 s) came before anything else was learned. Back at the waypoint
    (7.7/s) the 429 of before the fall bounds the probes again — but the next went × 1.5
    to 11.55/s, 1 % under that 429, and drew it again (one more 429, and the wait after
    it, where one probe halfway goes). A 429 met *in* the fall may bound the climb too
    tightly, so there only the whole factor reaching it halves the probe; the restored
    429 of before the fall is a bound like any other: the smallest step counts."""
    state = _in_a_fall(
        rate=7.7,
        ceiling=7.7,
        probe_from=5.13,
        waypoint=7.7,
        waypoint_bad=11.7,
        quiet_s=4.0,
        last_reprobe_ms=T0 - 4_500,
    )

    probe = decide_rate(state, SATURATED, PRONE, now_ms=T0)

    assert probe.reason == "reprobe"
    assert probe.state.bad_rate == pytest.approx(11.7)
    assert probe.state.ceiling == pytest.approx((7.7 + 11.7) / 2)


def test_after_a_probe_failed_far_under_the_waypoint_the_next_goes_a_whole_factor() -> None:
    """The 429 at 5.02 was the window's, more than a whole factor under the waypoint
    (9.49): after the wait the next probe goes × 1.5 again (5.02), not halfway to it
    (4.19, then 5.27, 7.91: three probes to where one goes). Within a whole factor of
    the waypoint the failed probe still halves the next one (the search for a steady
    capacity)."""
    failed = decide_rate(_in_a_fall(), RateWindow(throttled=1), PRONE, now_ms=T0).state
    near = decide_rate(
        _in_a_fall(waypoint=6.5, waypoint_bad=7.0), RateWindow(throttled=1), PRONE, now_ms=T0
    ).state

    # Past the longest wait: the probe's size alone is checked here.
    far_probe = decide_rate(failed, SATURATED, PRONE, now_ms=T0 + 20_000)
    near_probe = decide_rate(near, SATURATED, PRONE, now_ms=T0 + 20_000)

    assert (far_probe.reason, far_probe.state.ceiling) == ("reprobe", pytest.approx(3.35 * 1.5))
    assert (near_probe.reason, near_probe.state.ceiling) == (
        "reprobe",
        pytest.approx((3.35 + 5.02) / 2),
    )


def test_scenario_the_live_loop_woken_by_a_429_finds_the_bench_capacity_back_within_20_s() -> None:
    """The bench schedule on the model of the live loop (woken by a 429 as
    ``AdaptiveLoop.wait`` is), the delays of real processes, 24 seeds. Before: a probe
    failed in the window's last seconds on 4 seeds, the next waited 20 s and bisected
    towards the window's 429: 34-35 s to 90 % of the 10/s back, 0.82-0.84 of it used
    from 75 to 150 s on those seeds. Now every seed within 20 s and >= 0.9."""
    for seed in range(24):
        run_ = bench_run(seed, wake_on_429=True)

        assert run_.suspensions == 0
        assert (run_.reach_s(60) or math.inf) <= 20
        assert run_.utilisation(75, 150) >= 0.9
        assert run_.throttled_share() <= 0.01


@pytest.mark.parametrize("pause_s", [None, 0.02])
def test_scenario_after_a_fall_that_began_at_a_probe_the_rise_costs_one_429(
    pause_s: float | None,
) -> None:
    """The bench schedule on the live loop, 24 seeds, with the pause written at the
    report (``None``) or 20 ms after the call. On some seeds the dip's first 429 hit a
    probe from 9.49 to 9.97/s: it was taken for the probe's failure and its 9.97/s
    replaced the 10.44/s met before as the waypoint's 429. After the window 9.97/s
    worked, that bound was dropped, and the climb went × 1.5 twice — 2 or 3 429s in the
    40 s after the rise on 17 of 24 seeds with the pause at the report (8 of 24 at
    20 ms). The fall now keeps the bound the probe had: one 429, the probe past the
    10.44/s that finds whether the capacity came back higher, on all but two seeds."""
    after_rise = [
        sum(bench_run(seed, wake_on_429=True, pause_s=pause_s).throttled[60:100])
        for seed in range(24)
    ]

    assert max(after_rise) <= 2
    assert sum(n > 1 for n in after_rise) <= 2


def _deep_fall_suspended(**model: Any) -> int:
    """Seeds of 24 that got the fleet suspended at 25/s, 8/s from 40 s, 25/s from 100 s."""
    schedule = [(40.0, 8.0), (100.0, 25.0)]
    return sum(
        run_model(
            PRONE, seconds=180, capacity=25.0, schedule=schedule, seed=seed, **model
        ).suspensions
        > 0
        for seed in range(24)
    )


def test_scenario_with_the_pause_written_when_the_429_is_read_a_deep_fall_suspends_nobody() -> None:
    """25/s, 8/s from 40 s, 25/s from 100 s. The model wrote the fleet's pause only when
    the answer reached the controller (up to 0.3 s): 9 or 10 of 24 seeds were suspended,
    the slots of those 0.3 s running into a bucket that had run dry. A worker writes it
    as soon as it reads the 429: ``bench/adaptive.py --only variants`` measured 3.7-7.8
    ms from the call going out to the pause in force. With 20 ms, no seed is suspended
    — and with the pause at the report, some are (the model's own control)."""
    assert _deep_fall_suspended(**REAL_PROCESS_DELAYS, pause_s=0.02) == 0
    assert _deep_fall_suspended(**REAL_PROCESS_DELAYS) >= 5


def test_scenario_with_drifting_ticks_a_controller_woken_by_the_429_suspends_nobody() -> None:
    """25/s, 8/s from 40 s, 25/s from 100 s, the pause written at once, and ticks that
    drift as a real loop's do (1.003 s plus up to 10 ms). Deciding only at the ticks,
    some seeds are suspended: the fleet's 1-s pause for the fall's first 429 ends about
    when the next tick comes, and calls resumed at the old rate before it cut — each
    429 of them counting at the gateway. Woken by the 429's report (the live loop waits
    on the window's 429 token), the cut is in force before the pause ends: none is."""
    delays = {**REAL_PROCESS_DELAYS, "pause_s": 0.02, "tick_s": 1.003, "tick_jitter_s": 0.01}
    assert _deep_fall_suspended(**delays, wake_on_429=True) == 0
    assert _deep_fall_suspended(**delays) >= 2


def test_the_model_refuses_a_tick_that_does_not_move_on() -> None:
    with pytest.raises(ConfigurationError, match="tick_s"):
        run_model(PRONE, seconds=10, capacity=10.0, tick_s=0.0)


def test_scenario_a_fall_at_a_low_rate_is_cut_deep_enough_before_a_suspension() -> None:
    """3/s, 1.5/s from 40 s, 3/s from 100 s, the delays of real processes, 24 seeds. At
    that rate a fall's 429s come about 3 s apart — more than the two ticks that made a
    429 "a second in a row" — so each was cut × 0.9 (2.89 → 2.60 → 2.34/s) and the fifth
    within 10 s suspended the fleet (seed 16); under the new capacity took up to 10 s.
    A 429 within 10 calls of the last is a second in a row too: no seed suspended, every
    seed at or under 1.5/s within 5 s."""
    for seed in range(24):
        run_ = run_model(
            PRONE,
            seconds=180,
            capacity=3.0,
            schedule=[(40.0, 1.5), (100.0, 3.0)],
            **REAL_PROCESS_DELAYS,
            seed=seed,
        )

        assert run_.suspensions == 0
        assert (run_.under_s(40) or math.inf) <= 5


def test_scenario_the_bench_schedule_costs_no_429_above_the_ceiling_of_before_the_dip() -> None:
    """The bench schedule (10/s, 4/s from 40 s for 20 s), the delays of real processes,
    24 seeds. Before: the climb after the dip went a whole factor past the ceiling of
    before it (× 1.5 from ~7.9 to ~11.9/s) and drew a 429 there, then bisected towards
    it: 0.68-1.07 % of the calls (median 0.84). Stopping at the waypoint first:
    0.65-0.85 % (median 0.74); and holding next to the 429 of before the fall once past
    the waypoint: every seed under 0.8 % (0.65-0.78, median 0.68)."""
    for seed in range(24):
        run_ = bench_run(seed)

        assert run_.suspensions == 0
        assert run_.throttled_share() <= 0.008
        assert (run_.reach_s(60) or math.inf) <= 15


@pytest.mark.parametrize("back_to", [12.0, 15.0, 20.0])
def test_scenario_a_capacity_that_comes_back_higher_is_found_within_30_s(back_to: float) -> None:
    """10/s, 4/s from 40 s, then more than before the dip from 60 s. The climb stops at
    the ceiling of before the dip, but its 429 only bounds the next probe: one held
    there for max_quiet_s found 12/s after 36 s. Now 90 % of it within 30 s — on the
    tick-only loop. The live loop (woken by a 429, ``wake_on_429=True``) does not hold
    this yet: 1-10 of 24 seeds take over 30 s, up to 48 s (issue #14)."""
    for seed in range(24):
        run_ = run_model(
            PRONE,
            seconds=150,
            capacity=10.0,
            schedule=[(40.0, 4.0), (60.0, back_to)],
            **REAL_PROCESS_DELAYS,
            seed=seed,
        )

        assert run_.suspensions == 0
        assert (run_.reach_s(60) or math.inf) <= 30
