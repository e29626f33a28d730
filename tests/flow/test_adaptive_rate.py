"""The rate controller's maths: properties over any window sequence, then scenarios.

Everything runs on an injected clock (``now_ms`` is an argument): no Redis, no sleeps.
The scenarios drive the controller against a fluid model of the downstream (each
1-second tick, a rate above the capacity is a 429) whose capacity follows a schedule
the controller is never told.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
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

T0 = 1_700_000_000_000.0

policies = st.builds(
    lambda lo, span, step, cut, prone, margin, quiet, reprobe, headroom, recover: RatePolicy(
        min_rate=lo,
        max_rate=lo + span,
        increase_per_s=step,
        decrease_factor=cut,
        suspension_prone=prone,
        ceiling_margin=margin,
        quiet_s=quiet,
        reprobe_factor=reprobe,
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
    """Once a 429 was seen: rate <= ceiling, and within the quiet period after a 429 the
    rate stays at most ``margin ×`` the rate at which the 429 that set the ceiling
    appeared (or the floor); echoes within settle_s keep that ceiling."""
    prone = RatePolicy(**{**_fields(policy), "suspension_prone": True})
    bound, throttled_at = math.inf, None
    for decision in run(prone, steps):
        state, window_throttled = decision.state, decision.reason == "throttled"
        if window_throttled:
            assert state.ceiling is not None
            previous = decision.previous
            if (state.ceiling, state.ceiling_set_ms) != (previous.ceiling, previous.ceiling_set_ms):
                # this 429 set the ceiling
                bound = max(prone.min_rate, previous.rate * prone.ceiling_margin)
            else:  # an echo: within settle_s of the one that did, the ceiling stays
                assert state.ceiling == decision.previous.ceiling
                assert state.ceiling_set_ms is not None
                assert state.updated_ms - state.ceiling_set_ms < prone.settle_s * 1000
            throttled_at = state.updated_ms
        if state.ceiling is not None:
            assert state.rate <= state.ceiling + 1e-9
        assert throttled_at is None or state.updated_ms is not None
        if throttled_at is not None and state.updated_ms - throttled_at < prone.quiet_s * 1000:
            assert state.rate <= bound + 1e-9


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
    needed = math.ceil(math.log(policy.min_rate / state.rate) / math.log(policy.decrease_factor))
    if len(decisions) >= max(1, needed):
        assert rates[-1] == pytest.approx(policy.min_rate)


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

PRONE = RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True, increase_per_s=0.5)


def test_a_429_cuts_and_sets_the_ceiling_just_below_it() -> None:
    """rate 10 → 7 (×0.7), ceiling 9 (×0.9), reason "throttled", the 429 time kept."""
    decision = decide_rate(RateState(rate=10.0), RateWindow(throttled=2), PRONE, now_ms=T0)

    assert decision.reason == "throttled"
    assert decision.state.rate == pytest.approx(7.0)
    assert decision.state.ceiling == pytest.approx(9.0)
    assert decision.state.last_rejection_ms == T0
    assert decision.changed


def test_a_429_counts_at_the_rate_actually_sent() -> None:
    """The gate allowed 10/s but demand sent only 4/s: the 429 happened at 4/s."""
    window = RateWindow(throttled=1, sent_rate=4.0)
    decision = decide_rate(RateState(rate=10.0), window, PRONE, now_ms=T0)

    assert decision.state.rate == pytest.approx(2.8)
    assert decision.state.ceiling == pytest.approx(3.6)


def test_a_saturated_window_counts_the_429_at_the_gates_rate() -> None:
    """The gate held calls back at 10/s; the 429's pause cut the window's measured rate
    to 2/s: the 429 still happened at 10/s (ceiling 9, not 1.8)."""
    window = RateWindow(throttled=1, saturated=True, sent_rate=2.0)
    decision = decide_rate(RateState(rate=10.0), window, PRONE, now_ms=T0)

    assert decision.state.rate == pytest.approx(7.0)
    assert decision.state.ceiling == pytest.approx(9.0)


def test_an_echo_within_settle_s_cuts_the_rate_but_keeps_the_ceiling() -> None:
    """429 at 10/s → ceiling 9, rate 7; another 429 1 s later (a slot reserved at the
    old spacing) → rate 4.9, ceiling still 9; one 3 s later is news → ceiling 6.3."""
    first = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), PRONE, now_ms=T0)
    echo = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 1_000)
    news = decide_rate(first.state, RateWindow(throttled=1), PRONE, now_ms=T0 + 3_000)

    assert (echo.state.rate, echo.state.ceiling) == (pytest.approx(4.9), pytest.approx(9.0))
    assert echo.state.ceiling_set_ms == T0
    assert (news.state.rate, news.state.ceiling) == (pytest.approx(4.9), pytest.approx(6.3))
    assert news.state.ceiling_set_ms == T0 + 3_000


def test_a_429_with_headers_goes_straight_down_to_the_advertised_rate() -> None:
    """9.5/s, a 429 whose answer advertises 240 per minute: 3.8/s at once, not 6.65 (a
    ×0.7 cut per tick while the downstream keeps counting offences)."""
    hint = RateLimitHint(limit=240, window_s=60)
    decision = decide_rate(
        RateState(rate=9.5), RateWindow(throttled=2, hint=hint), PRONE, now_ms=T0
    )

    assert decision.reason == "throttled"
    assert decision.state.rate == pytest.approx(3.8)
    assert decision.state.ceiling == pytest.approx(8.55)


def test_a_429_never_raises_the_rate_to_a_generous_advertisement() -> None:
    """Headers claiming 50/s on a 429: the cut stands (a 429 outranks an advertisement)."""
    hint = RateLimitHint(limit=50, window_s=1)
    decision = decide_rate(
        RateState(rate=9.5), RateWindow(throttled=1, hint=hint), PRONE, now_ms=T0
    )

    assert decision.state.rate == pytest.approx(6.65)


def test_a_503_cuts_without_moving_the_ceiling() -> None:
    """An outage says nothing about the rate: cut, but keep the ceiling learned from 429s."""
    state = RateState(rate=8.0, ceiling=9.0)
    decision = decide_rate(state, RateWindow(unavailable=1), PRONE, now_ms=T0)

    assert decision.reason == "unavailable"
    assert decision.state.rate == pytest.approx(5.6)
    assert decision.state.ceiling == 9.0


def test_a_plain_downstream_keeps_no_ceiling() -> None:
    """Without the suspension-prone flag a 429 cuts but leaves no ceiling (plain AIMD)."""
    plain = RatePolicy(min_rate=1.0, max_rate=50.0)
    decision = decide_rate(RateState(rate=10.0), RateWindow(throttled=1), plain, now_ms=T0)

    assert decision.state.ceiling is None
    assert decision.state.rate == pytest.approx(7.0)


def test_saturated_success_grows_additively_by_elapsed_time() -> None:
    """0.5/s per second, 2 s since the last decision: 3 → 4; the step is capped at 5 s."""
    state = RateState(rate=3.0, updated_ms=T0)
    window = RateWindow(successes=6, saturated=True)

    grown = decide_rate(state, window, PRONE, now_ms=T0 + 2_000)
    capped = decide_rate(state, window, PRONE, now_ms=T0 + 3_600_000)

    assert (grown.reason, grown.state.rate) == ("increase", pytest.approx(4.0))
    assert capped.state.rate == pytest.approx(3.0 + 0.5 * PRONE.max_step_s)


def test_an_idle_gate_learns_nothing() -> None:
    """Calls succeed but the gate held nobody back: the rate stays."""
    state = RateState(rate=3.0, updated_ms=T0)
    decision = decide_rate(state, RateWindow(successes=3), PRONE, now_ms=T0 + 1_000)

    assert (decision.reason, decision.state.rate, decision.changed) == ("not_saturated", 3.0, False)


def test_at_the_ceiling_the_controller_waits_for_quiet_then_raises_a_little() -> None:
    """At the ceiling: hold while a 429 is recent; after quiet_s, ceiling × reprobe_factor."""
    state = RateState(rate=9.0, ceiling=9.0, last_rejection_ms=T0, updated_ms=T0)
    window = RateWindow(successes=9, saturated=True)

    early = decide_rate(state, window, PRONE, now_ms=T0 + 30_000)
    late = decide_rate(state, window, PRONE, now_ms=T0 + 60_000)

    assert (early.reason, early.state.ceiling) == ("at_ceiling", 9.0)
    assert late.reason == "reprobe"
    assert late.state.ceiling == pytest.approx(9.9)
    assert late.state.rate == 9.0  # the rate climbs to it additively afterwards
    assert late.state.last_reprobe_ms == T0 + 60_000


def test_a_second_raise_waits_a_full_quiet_period_after_the_first() -> None:
    """Raised at t=60 s, climbed to the new ceiling by t=62 s: the next raise comes at
    t=120 s, not as soon as the rate touches the new ceiling."""
    state = RateState(rate=9.0, ceiling=9.0, last_rejection_ms=T0, updated_ms=T0)
    window = RateWindow(successes=9, saturated=True)
    reasons = {}
    for second in range(60, 125):
        decision = decide_rate(state, window, PRONE, now_ms=T0 + second * 1000.0)
        reasons[second] = decision.reason
        state = decision.state

    raises = [second for second, reason in reasons.items() if reason == "reprobe"]
    assert raises == [60, 120]
    assert reasons[70] == "at_ceiling"


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


def test_headers_cannot_lift_the_ceiling_until_the_quiet_period_is_over() -> None:
    """A 429 at 9/s, then headers claiming 20/s: capped at the ceiling for quiet_s,
    after which the advertisement becomes the new ceiling."""
    hint = RateLimitHint(limit=20, window_s=1)
    state = RateState(rate=5.0, ceiling=8.1, last_rejection_ms=T0, updated_ms=T0)

    soon = decide_rate(state, RateWindow(hint=hint), PRONE, now_ms=T0 + 10_000)
    later = decide_rate(state, RateWindow(hint=hint), PRONE, now_ms=T0 + 61_000)

    assert (soon.state.rate, soon.state.ceiling) == (pytest.approx(8.1), 8.1)
    assert (later.state.rate, later.state.ceiling) == (pytest.approx(19.0), pytest.approx(19.0))


def test_headers_lift_the_rate_only_after_recover_s() -> None:
    """Cut to 6.65 by a 429 at T0: headers saying 9.5/s keep 6.65 for recover_s (10 s),
    then lift it to the ceiling; headers saying less still lower it at once."""
    state = RateState(
        rate=6.65, ceiling=8.55, ceiling_set_ms=T0, last_rejection_ms=T0, updated_ms=T0
    )
    generous = RateWindow(hint=RateLimitHint(limit=600, window_s=60))
    meagre = RateWindow(hint=RateLimitHint(limit=240, window_s=60))

    early = decide_rate(state, generous, PRONE, now_ms=T0 + 5_000)
    later = decide_rate(state, generous, PRONE, now_ms=T0 + 10_000)
    lower = decide_rate(state, meagre, PRONE, now_ms=T0 + 5_000)

    assert early.state.rate == pytest.approx(6.65)
    assert later.state.rate == pytest.approx(8.55)
    assert lower.state.rate == pytest.approx(3.8)


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
        "rate": 7.0,
        "previous_rate": 10.0,
        "ceiling": 9.0,
        "previous_ceiling": None,
        "pause_s": None,
    }


def test_the_state_round_trips_through_plain_data() -> None:
    """as_dict → from_dict is the identity; garbage is a ConfigurationError."""
    state = RateState(
        rate=4.5, ceiling=6.0, ceiling_set_ms=T0, last_rejection_ms=T0, updated_ms=T0 + 1
    )

    assert RateState.from_dict(state.as_dict()) == state
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


# -- scenarios against a model downstream -----------------------------------------------


@dataclass
class Trace:
    rates: list[float]
    throttled_at: list[int]
    decisions: list[RateDecision]


def drive(
    policy: RatePolicy,
    capacity: Callable[[int], float],
    seconds: int,
    *,
    advertise: Callable[[int], RateLimitHint | None] = lambda _t: None,
) -> Trace:
    """One decision per second; a rate above the second's capacity draws a 429."""
    state, trace = initial_rate_state(policy), Trace([], [], [])
    for t in range(seconds):
        cap = capacity(t)
        over = state.rate > cap
        window = RateWindow(
            successes=math.floor(min(state.rate, cap)),
            throttled=1 if over else 0,
            saturated=True,
            sent_rate=state.rate,
            hint=advertise(t),
        )
        decision = decide_rate(state, window, policy, now_ms=T0 + t * 1000.0)
        if over:
            trace.throttled_at.append(t)
        trace.decisions.append(decision)
        state = decision.state
        trace.rates.append(state.rate)
    return trace


def maintenance(t: int) -> float:
    """10/s, then 4/s for a maintenance minute at t = 300 s, then 10/s again."""
    return 4.0 if 300 <= t < 360 else 10.0


def test_scenario_learns_capacity_rides_out_maintenance_and_recovers() -> None:
    """Never told the schedule: climbs to ~10/s with one 429 per quiet period at most,
    is below 4/s within seconds of the dip, and climbs back once the dip is over."""
    trace = drive(PRONE, maintenance, 1_200)
    before = [t for t in trace.throttled_at if t < 300]
    during = [t for t in trace.throttled_at if 300 <= t < 360]
    after = [t for t in trace.throttled_at if t >= 360]

    assert before
    assert len(before) <= 1 + 300 // 60
    assert max(trace.rates[100:300]) <= 10.0 * 1.1  # never more than one step above it
    assert min(trace.rates[100:300]) >= 6.0  # and no needless collapse
    assert during
    assert during[0] == 300
    assert all(rate <= 4.0 for rate in trace.rates[315:360])  # settled under the dip
    assert len(during) <= 6
    assert len(after) <= (1_200 - 360) // 60  # one 429 per quiet period at most
    assert trace.rates[-1] >= 7.0  # recovered well above the dip's 4/s


def test_scenario_a_plain_downstream_keeps_probing() -> None:
    """The same schedule without the flag: plain AIMD saws into the capacity often —
    the reason the flag exists."""
    plain = RatePolicy(min_rate=1.0, max_rate=50.0, increase_per_s=0.5)
    prone = drive(PRONE, maintenance, 1_200)
    aimd = drive(plain, maintenance, 1_200)

    assert len(aimd.throttled_at) > 2 * len(prone.throttled_at)


def test_scenario_headers_reach_the_rate_with_no_429_at_all() -> None:
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
    package's private modules."""
    from tidegate.flow import adaptive

    names = adaptive.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        value = getattr(adaptive, name)
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")):
            assert value.__module__.startswith("tidegate.flow.adaptive._")
