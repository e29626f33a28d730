"""The concurrency controller's maths: properties, examples, and a model TOS.

The model TOS serves ``capacity`` calls at its base latency; beyond that, calls share
it and every one takes ``base × in_flight / capacity`` (latency grows with the calls
beyond capacity). The controller is never told the capacity.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive import (
    ConcurrencyDecision,
    ConcurrencyPolicy,
    ConcurrencyState,
    LatencyWindow,
    decide_concurrency,
    initial_concurrency_state,
)

T0 = 1_700_000_000_000.0

policies = st.builds(
    lambda lo, span, tolerance, smoothing, remeasure, probe, samples, backoff: ConcurrencyPolicy(
        min_concurrency=lo,
        max_concurrency=lo + span,
        tolerance=tolerance,
        smoothing=smoothing,
        remeasure_s=remeasure,
        probe_concurrency=probe,
        min_samples=samples,
        backoff_factor=backoff,
    ),
    st.integers(1, 8),
    st.integers(0, 200),
    st.floats(1, 3),
    st.floats(0.01, 1),
    st.floats(1, 3_600),
    st.one_of(st.none(), st.integers(1, 10)),
    st.integers(1, 20),
    st.floats(0.1, 0.95),
)


@st.composite
def latency_windows(draw: Any) -> LatencyWindow:
    samples = draw(st.integers(0, 100))
    if samples == 0:
        return LatencyWindow(rejected=draw(st.sampled_from([0, 0, 1])))
    low = draw(st.floats(1, 1_000))
    return LatencyWindow(
        samples=samples,
        latency_ms=low * draw(st.floats(1, 20)),
        min_latency_ms=low,
        max_in_flight=draw(st.integers(0, 300)),
        rejected=draw(st.sampled_from([0, 0, 0, 2])),
    )


ticks = st.lists(st.tuples(st.floats(0, 120_000), latency_windows()), min_size=1, max_size=60)


def run(
    policy: ConcurrencyPolicy, steps: list[tuple[float, LatencyWindow]]
) -> list[ConcurrencyDecision]:
    state, now, out = initial_concurrency_state(policy), T0, []
    for gap, window in steps:
        now += gap
        decision = decide_concurrency(state, window, policy, now_ms=now)
        out.append(decision)
        state = decision.state
    return out


@given(policy=policies, steps=ticks)
@settings(max_examples=400, deadline=None)
def test_the_limit_never_leaves_the_operators_box(
    policy: ConcurrencyPolicy, steps: list[tuple[float, LatencyWindow]]
) -> None:
    """min <= concurrency <= max (or the probe's pin, while re-measuring)."""
    for decision in run(policy, steps):
        state = decision.state
        if state.probing:
            assert state.concurrency == policy.probe_limit
        else:
            assert policy.min_concurrency <= state.concurrency <= policy.max_concurrency


@given(policy=policies, steps=ticks)
@settings(max_examples=400, deadline=None)
def test_the_minimum_latency_only_rises_through_a_clean_remeasurement(
    policy: ConcurrencyPolicy, steps: list[tuple[float, LatencyWindow]]
) -> None:
    """A queued latency is never taken for the baseline: the minimum goes up only on a
    "remeasured" window measured at the pinned level (or at or below it anyway)."""
    for decision in run(policy, steps):
        before, after = decision.previous.min_latency_ms, decision.state.min_latency_ms
        if before is not None and after is not None and after > before:
            assert decision.reason in {"remeasured", "gradient", "not_saturated"}
            if decision.reason != "remeasured":
                assert decision.previous.concurrency <= policy.probe_limit


@given(policy=policies, steps=ticks)
@settings(max_examples=400, deadline=None)
def test_rejections_never_raise_the_limit_and_queues_shrink_it(
    policy: ConcurrencyPolicy, steps: list[tuple[float, LatencyWindow]]
) -> None:
    """A 503 never raises the limit; a judged window whose gradient hit the 0.5 clamp
    shrinks any limit above 4 (where ``limit/2 + sqrt(limit) < limit``)."""
    for decision in run(policy, steps):
        before, after = decision.previous.limit, decision.state.limit
        if decision.reason == "rejected":
            assert after <= before
            if before > policy.min_concurrency / policy.backoff_factor:
                assert after < before
        clamped = decision.reason == "gradient" and decision.gradient == 0.5
        if clamped and max(4, policy.min_concurrency) < before <= policy.max_concurrency:
            assert after < before


def test_flat_latency_with_the_leases_in_use_grows_the_limit() -> None:
    """Latency at its floor, 8 of 8 leases used: 8 → 8 + 0.2·sqrt(8) ≈ 8.57."""
    policy = ConcurrencyPolicy(max_concurrency=64, min_samples=5)
    state = ConcurrencyState(limit=8.0)
    flat = LatencyWindow(samples=40, latency_ms=50.0, min_latency_ms=50.0, max_in_flight=8)

    decision = decide_concurrency(state, flat, policy, now_ms=T0)

    assert decision.reason == "gradient"
    assert decision.gradient == 1.0
    assert decision.state.limit == pytest.approx(8.0 + 0.2 * math.sqrt(8.0))


def test_an_unused_limit_does_not_grow() -> None:
    """Only 2 of 20 leases used: flat latency proves nothing about 20, so no growth."""
    policy = ConcurrencyPolicy(max_concurrency=64, min_samples=5)
    quiet = LatencyWindow(samples=40, latency_ms=50.0, min_latency_ms=50.0, max_in_flight=2)

    decision = decide_concurrency(ConcurrencyState(limit=20.0), quiet, policy, now_ms=T0)

    assert (decision.reason, decision.state.limit, decision.changed) == (
        "not_saturated",
        20.0,
        False,
    )


def test_too_few_samples_are_not_judged() -> None:
    """Three calls in a window are noise: the limit holds (the minimum is still kept)."""
    policy = ConcurrencyPolicy(min_samples=10)
    few = LatencyWindow(samples=3, latency_ms=900.0, min_latency_ms=40.0, max_in_flight=9)

    decision = decide_concurrency(ConcurrencyState(limit=9.0), few, policy, now_ms=T0)

    assert (decision.reason, decision.state.limit) == ("too_few_samples", 9.0)
    assert decision.state.min_latency_ms == 40.0


def test_a_rejection_cuts_by_the_backoff_factor() -> None:
    """A refused connection: 10 → 9 (×0.9), reason "rejected"."""
    decision = decide_concurrency(
        ConcurrencyState(limit=10.0), LatencyWindow(rejected=1), ConcurrencyPolicy(), now_ms=T0
    )

    assert (decision.reason, decision.state.limit) == ("rejected", pytest.approx(9.0))
    assert decision.changed


def test_frozen_keeps_the_limit() -> None:
    """An operator's freeze: the limit holds under any latency."""
    slow = LatencyWindow(samples=50, latency_ms=5_000.0, min_latency_ms=10.0, max_in_flight=30)
    state = ConcurrencyState(limit=30.0, min_latency_ms=10.0, measured_ms=T0)

    decision = decide_concurrency(state, slow, ConcurrencyPolicy(), now_ms=T0, mode="frozen")

    assert (decision.reason, decision.state.limit) == ("frozen", 30.0)


def test_the_minimum_is_remeasured_with_the_limit_pinned_low() -> None:
    """After remeasure_s: pin to the probe level, take the first clean window's minimum
    (a slower baseline, 40 ms instead of 10 ms), restore the limit."""
    policy = ConcurrencyPolicy(remeasure_s=300.0, probe_concurrency=2, min_samples=5)
    state = ConcurrencyState(limit=12.0, min_latency_ms=10.0, measured_ms=T0)
    queued = LatencyWindow(samples=30, latency_ms=90.0, min_latency_ms=60.0, max_in_flight=12)
    draining = LatencyWindow(samples=30, latency_ms=70.0, min_latency_ms=50.0, max_in_flight=9)
    clean = LatencyWindow(samples=8, latency_ms=42.0, min_latency_ms=40.0, max_in_flight=2)

    pinned = decide_concurrency(state, queued, policy, now_ms=T0 + 300_000)
    waiting = decide_concurrency(pinned.state, draining, policy, now_ms=T0 + 301_000)
    done = decide_concurrency(waiting.state, clean, policy, now_ms=T0 + 302_000)

    assert (pinned.reason, pinned.state.concurrency, pinned.state.resume_limit) == (
        "remeasure",
        2,
        12.0,
    )
    assert (waiting.reason, waiting.state.concurrency) == ("probing", 2)
    assert waiting.state.min_latency_ms == 10.0  # a draining window proves nothing
    assert (done.reason, done.state.concurrency, done.state.min_latency_ms) == (
        "remeasured",
        12,
        40.0,
    )
    assert not done.state.probing
    assert done.state.measured_ms == T0 + 302_000


def test_a_remeasurement_without_calls_gives_up_and_restores_the_limit() -> None:
    """No traffic while pinned: after probe_timeout_s the old minimum and limit are back."""
    policy = ConcurrencyPolicy(remeasure_s=60.0, probe_timeout_s=30.0)
    state = ConcurrencyState(
        limit=1.0, min_latency_ms=10.0, measured_ms=T0, probing_since_ms=T0, resume_limit=9.0
    )

    early = decide_concurrency(state, LatencyWindow(), policy, now_ms=T0 + 10_000)
    late = decide_concurrency(state, LatencyWindow(), policy, now_ms=T0 + 30_000)

    assert (early.reason, early.state.concurrency) == ("probing", 1)
    assert (late.reason, late.state.concurrency, late.state.min_latency_ms) == (
        "remeasure_timeout",
        9,
        10.0,
    )


def test_a_lower_latency_lowers_the_minimum_at_once() -> None:
    """A faster call than the known minimum is the truth: no re-measurement needed."""
    policy = ConcurrencyPolicy(min_samples=1)
    state = ConcurrencyState(limit=4.0, min_latency_ms=50.0, measured_ms=T0)
    fast = LatencyWindow(samples=5, latency_ms=40.0, min_latency_ms=30.0, max_in_flight=4)

    decision = decide_concurrency(state, fast, policy, now_ms=T0 + 1_000)

    assert (decision.state.min_latency_ms, decision.state.measured_ms) == (30.0, T0 + 1_000)


def test_the_event_has_stable_keys() -> None:
    """One decision, one event: the reason, the whole-number limits, the gradient."""
    policy = ConcurrencyPolicy(min_samples=1)
    state = ConcurrencyState(limit=16.0, min_latency_ms=50.0, measured_ms=T0)
    slow = LatencyWindow(samples=20, latency_ms=300.0, min_latency_ms=200.0, max_in_flight=16)

    event = decide_concurrency(state, slow, policy, now_ms=T0).event()

    assert event == {
        "reason": "gradient",
        "concurrency": 15,
        "previous_concurrency": 16,
        "limit": 15.2,
        "gradient": 0.5,
        "min_latency_ms": 50.0,
    }


def test_the_state_round_trips_through_plain_data() -> None:
    """as_dict → from_dict is the identity; garbage is a ConfigurationError."""
    state = ConcurrencyState(
        limit=7.5, min_latency_ms=11.0, measured_ms=T0, probing_since_ms=T0, resume_limit=9.0
    )

    assert ConcurrencyState.from_dict(state.as_dict()) == state
    with pytest.raises(ConfigurationError):
        ConcurrencyState.from_dict({"limit": 0.5})
    with pytest.raises(ConfigurationError):
        ConcurrencyState.from_dict({"limit": 3, "min_latency_ms": -2})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_concurrency": 0},
        {"min_concurrency": 4, "max_concurrency": 3},
        {"max_concurrency": 2.5},
        {"start_concurrency": 1_000},
        {"tolerance": 0.9},
        {"smoothing": 0},
        {"smoothing": 1.5},
        {"remeasure_s": 0},
        {"probe_concurrency": 0},
        {"probe_timeout_s": -1},
        {"min_samples": 0},
        {"backoff_factor": 1},
        {"headroom": -1},
        {"headroom": math.nan},
    ],
)
def test_nonsense_policies_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    """Every field is checked at construction."""
    with pytest.raises(ConfigurationError):
        ConcurrencyPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"samples": -1},
        {"samples": 3},
        {"samples": 3, "latency_ms": 10.0, "min_latency_ms": 20.0},
        {"latency_ms": 0.0},
        {"max_in_flight": 1.5},
    ],
)
def test_nonsense_windows_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    """A window with samples but no latency, or a minimum above the mean, is a bug."""
    with pytest.raises(ConfigurationError):
        LatencyWindow(**kwargs)


# -- a model TOS ------------------------------------------------------------------------


def tos_latency_ms(in_flight: int, capacity: int, base_ms: float = 50.0) -> float:
    """Base latency up to the capacity, then shared: base × in_flight / capacity."""
    return base_ms * max(1.0, in_flight / capacity)


def drive(policy: ConcurrencyPolicy, capacity: Any, seconds: int) -> list[int]:
    """Saturated demand, one decision per second; returns the limit after each."""
    state, limits = initial_concurrency_state(policy), []
    for t in range(seconds):
        in_flight = state.concurrency
        latency = tos_latency_ms(in_flight, capacity(t))
        window = LatencyWindow(
            samples=20, latency_ms=latency, min_latency_ms=latency, max_in_flight=in_flight
        )
        state = decide_concurrency(state, window, policy, now_ms=T0 + t * 1000.0).state
        limits.append(state.concurrency)
    return limits


def test_a_tos_is_held_near_its_capacity_not_at_the_maximum() -> None:
    """Capacity 8, maximum 64, twenty minutes with re-measurements: the limit settles
    between 8 and 2.5 × 8, far below 64, and latency there stays within 2.5 × the floor
    (no ratchet from a queued latency taken for the baseline)."""
    policy = ConcurrencyPolicy(max_concurrency=64, min_samples=5)
    limits = drive(policy, lambda _t: 8, 1_200)
    settled = [limit for limit in limits[300:] if limit > policy.probe_limit]

    assert min(settled) >= 8
    assert max(settled) <= 20
    assert tos_latency_ms(max(settled), 8) <= 2.5 * 50.0


def test_a_tos_that_loses_half_its_capacity_gets_half_the_calls() -> None:
    """Capacity 16 then 8 from t = 300 s: the settled limit roughly halves."""
    policy = ConcurrencyPolicy(max_concurrency=64, min_samples=5)
    limits = drive(policy, lambda t: 16 if t < 300 else 8, 900)
    before, after = max(limits[200:300]), max(limits[600:900])

    assert after < before
    assert after <= 20
    assert before >= 16


def test_a_lower_tolerance_holds_the_tos_closer_to_its_capacity() -> None:
    """tolerance 1.1 allows a shorter queue than Gradient2's 1.5."""
    strict = max(drive(ConcurrencyPolicy(tolerance=1.1, min_samples=5), lambda _t: 8, 900)[300:])
    loose = max(drive(ConcurrencyPolicy(tolerance=1.5, min_samples=5), lambda _t: 8, 900)[300:])

    assert 8 <= strict < loose
