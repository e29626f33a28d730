"""The decision maths: hysteresis, the shedding latch, gate-aware signals, worker counts.

Pure functions of (samples, config), so most properties are checked with hypothesis
over arbitrary depth sequences.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.errors import ConfigurationError
from tidegate.load.watermarks import (
    GateView,
    Level,
    LoadState,
    ScalingPolicy,
    Signal,
    Watermarks,
    advance,
)


def run(
    depths: Sequence[int],
    marks: Watermarks,
    *,
    gate: GateView | None = None,
    policy: ScalingPolicy | None = None,
) -> list[LoadState]:
    state, states = LoadState("q"), []
    for depth in depths:
        state = advance(state, depth, marks, gate=gate, policy=policy)
        states.append(state)
    return states


@st.composite
def watermarks(draw: st.DrawFn) -> Watermarks:
    lwm = draw(st.integers(0, 500))
    hwm = draw(st.integers(lwm + 2, lwm + 1000))
    return Watermarks(hwm=hwm, lwm=lwm, shed_after=draw(st.integers(1, 6)))


# -- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hwm", "lwm", "names"),
    [(100, 100, ["QUEUE_LWM=100", "QUEUE_HWM=100"]), (10, 50, ["QUEUE_LWM=50", "QUEUE_HWM=10"])],
)
def test_lwm_not_below_hwm_is_a_configuration_error(hwm: int, lwm: int, names: list[str]) -> None:
    """LWM >= HWM is refused, and the message names both values."""
    with pytest.raises(ConfigurationError) as error:
        Watermarks(hwm=hwm, lwm=lwm)
    for name in names:
        assert name in str(error.value)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"hwm": 100, "lwm": -1}, "QUEUE_LWM must be a whole number >= 0, got -1"),
        ({"hwm": 0, "lwm": 0}, "QUEUE_HWM must be a whole number >= 1, got 0"),
        ({"hwm": 10.5, "lwm": 1}, "got 10.5"),
        ({"hwm": 10, "lwm": 1, "shed_after": 0}, "SHED_AFTER_INTERVALS"),
    ],
)
def test_invalid_values_are_refused_with_the_value(kwargs: dict[str, float], fragment: str) -> None:
    """Negative, zero or fractional values raise ConfigurationError naming the value."""
    with pytest.raises(ConfigurationError, match=fragment.replace(".", r"\.")):
        Watermarks(**kwargs)  # type: ignore[arg-type]


def test_defaults_come_from_the_environment() -> None:
    """TIDEGATE_QUEUE_HWM / _LWM / TIDEGATE_SHED_AFTER_INTERVALS, validated together."""
    env = {
        "TIDEGATE_QUEUE_HWM": "800",
        "TIDEGATE_QUEUE_LWM": "80",
        "TIDEGATE_SHED_AFTER_INTERVALS": "4",
    }
    assert Watermarks.from_env(env) == Watermarks(hwm=800, lwm=80, shed_after=4)
    with pytest.raises(ConfigurationError, match="QUEUE_LWM=900"):
        Watermarks.from_env({"TIDEGATE_QUEUE_HWM": "800", "TIDEGATE_QUEUE_LWM": "900"})
    with pytest.raises(ConfigurationError, match="TIDEGATE_QUEUE_HWM must be a number"):
        Watermarks.from_env({"TIDEGATE_QUEUE_HWM": "lots"})


# -- hysteresis ------------------------------------------------------------------------


def test_the_signal_follows_the_bands() -> None:
    """Above HWM: scale_out; back past the middle: hold; at LWM: scale_in."""
    marks = Watermarks(hwm=100, lwm=20)  # middle 60
    signals = [s.signal for s in run([50, 150, 99, 61, 59, 21, 20, 59, 61], marks)]
    assert signals == [
        Signal.HOLD,  # nothing touched yet
        Signal.SCALE_OUT,
        Signal.SCALE_OUT,  # below HWM, above the middle: still out
        Signal.SCALE_OUT,
        Signal.HOLD,  # past the middle
        Signal.HOLD,
        Signal.SCALE_IN,  # at LWM
        Signal.SCALE_IN,  # not past the middle yet
        Signal.HOLD,
    ]


@settings(max_examples=300)
@given(marks=watermarks(), data=st.data())
def test_no_flapping_at_the_high_watermark(marks: Watermarks, data: st.DataObject) -> None:
    """Once over HWM, noise around HWM that stays above the middle never changes the signal."""
    middle = (marks.hwm + marks.lwm) / 2
    low = int(middle) + 1 if middle != int(middle) else int(middle)
    noise = data.draw(st.lists(st.integers(low, marks.hwm + 50), max_size=60))
    states = run([marks.hwm + 1, *noise], marks)
    assert {s.signal for s in states} == {Signal.SCALE_OUT}


@settings(max_examples=300)
@given(marks=watermarks(), data=st.data())
def test_no_flapping_at_the_low_watermark(marks: Watermarks, data: st.DataObject) -> None:
    """Once at LWM, noise around LWM that stays below the middle never changes the signal."""
    middle = (marks.hwm + marks.lwm) / 2
    noise = data.draw(st.lists(st.integers(0, int(middle)), max_size=60))
    states = run([marks.lwm, *noise], marks)
    assert {s.signal for s in states} == {Signal.SCALE_IN}


@settings(max_examples=300)
@given(marks=watermarks(), data=st.data())
def test_no_back_and_forth_within_half_a_band(marks: Watermarks, data: st.DataObject) -> None:
    """For ANY depth sequence: while the depth stays within an interval narrower than half
    the band, the level never returns to one it has left (no A → B → A)."""
    depths = data.draw(st.lists(st.integers(0, marks.hwm * 2 + 10), min_size=1, max_size=40))
    levels = [s.level for s in run(depths, marks)]
    half = (marks.hwm - marks.lwm) / 2
    for i in range(len(depths)):
        low = high = depths[i]
        visited = [levels[i]]
        for j in range(i + 1, len(depths)):
            low, high = min(low, depths[j]), max(high, depths[j])
            if high - low >= half:
                break
            if levels[j] != visited[-1]:
                assert levels[j] not in visited, (depths[i : j + 1], levels[i : j + 1])
                visited.append(levels[j])


# -- shedding --------------------------------------------------------------------------


def test_a_brief_spike_never_sheds() -> None:
    """Two samples above HWM with shed_after=3, then back down: no shedding at any point."""
    marks = Watermarks(hwm=100, lwm=10, shed_after=3)
    states = run([0, 5000, 5000, 90, 5000, 5000, 50], marks)
    assert not any(s.shedding for s in states)
    assert [s.over_hwm_intervals for s in states] == [0, 1, 2, 0, 1, 2, 0]


@settings(max_examples=300)
@given(marks=watermarks(), data=st.data())
def test_spikes_shorter_than_shed_after_never_shed(marks: Watermarks, data: st.DataObject) -> None:
    """Any sequence whose runs above HWM are all shorter than shed_after never sheds."""
    runs = data.draw(
        st.lists(
            st.tuples(
                st.integers(1, marks.shed_after - 1) if marks.shed_after > 1 else st.just(0),
                st.integers(0, marks.hwm),
            ),
            max_size=20,
        )
    )
    depths: list[int] = []
    for length, below in runs:
        depths += [marks.hwm + 1] * length + [below]
    assert not any(s.shedding for s in run(depths, marks))


def test_sustained_overload_sheds_until_the_lwm() -> None:
    """Shedding starts at the shed_after-th sample above HWM and stops only at LWM."""
    marks = Watermarks(hwm=100, lwm=10, shed_after=3)
    states = run([500, 500, 500, 60, 99, 101, 11, 10, 500], marks)
    assert [s.shedding for s in states] == [
        False,
        False,
        True,
        True,  # back inside the band: still shedding (no toggling at the HWM)
        True,
        True,
        True,
        False,  # at LWM: the surge is over
        False,  # one sample above HWM again: a new streak starts
    ]


# -- the gate --------------------------------------------------------------------------


def test_scaling_out_against_a_saturated_gate_is_hold_with_a_reason() -> None:
    """Workers already queued for tokens (wait > one token interval): hold, not scale_out."""
    marks = Watermarks(hwm=100, lwm=10)
    policy = ScalingPolicy(backlog_per_worker=10, service_s=0.5, max_workers=100)
    saturated = GateView("customs", rate=10.0, burst=1, wait_s=2.0, tokens_available=0)
    (state,) = run([1000], marks, gate=saturated, policy=policy)
    assert (state.signal, state.reason) == (Signal.HOLD, "downstream_rate")
    assert state.backlog_workers == 100
    assert state.quota_workers == 5  # ceil(10/s × 0.5 s)
    assert state.desired_workers == 5


@pytest.mark.parametrize(
    ("gate", "reason"),
    [
        (GateView("tos", rate=50, paused_for_s=7.0), "downstream_paused"),
        (GateView("tos", rate=50, concurrency=4, leases_held=4), "downstream_concurrency"),
        (GateView("tos", rate=50, burst=5, wait_s=0.05), "downstream_rate"),
    ],
)
def test_each_kind_of_bottleneck_has_its_reason(gate: GateView, reason: str) -> None:
    """Paused, every lease held, tokens queued: each is named in the hold's reason."""
    (state,) = run([1000], Watermarks(hwm=100, lwm=10), gate=gate)
    assert (state.signal, state.reason) == (Signal.HOLD, reason)


def test_a_gate_with_spare_capacity_lets_the_queue_scale_out() -> None:
    """A wait under one token interval is the normal gap between admissions: scale out."""
    gate = GateView("customs", rate=10.0, burst=1, wait_s=0.08, tokens_available=0)
    (state,) = run([1000], Watermarks(hwm=100, lwm=10), gate=gate)
    assert state.signal is Signal.SCALE_OUT


def test_the_bottleneck_is_released_only_after_free_samples() -> None:
    """A gate that blinks free for one sample does not flip hold → scale_out → hold."""
    marks = Watermarks(hwm=100, lwm=10)
    bound = GateView("customs", rate=10.0, wait_s=1.0)
    free = GateView("customs", rate=10.0, wait_s=0.0)
    policy = ScalingPolicy(release_after=3)
    state = LoadState("q")
    signals = []
    for gate in [bound, free, bound, free, free, free, free]:
        state = advance(state, 1000, marks, gate=gate, policy=policy)
        signals.append(state.signal)
    assert signals == [Signal.HOLD] * 5 + [Signal.SCALE_OUT] * 2


@settings(max_examples=300)
@given(
    depth=st.integers(0, 100_000),
    rate=st.floats(0.1, 500),
    service_s=st.floats(0.01, 5),
    concurrency=st.integers(0, 20),
    per_worker=st.integers(1, 200),
)
def test_desired_workers_never_exceed_what_the_downstream_can_use(
    depth: int, rate: float, service_s: float, concurrency: int, per_worker: int
) -> None:
    """desired = min(backlog-based, quota-based): never above the quota (beyond min_workers)."""
    policy = ScalingPolicy(backlog_per_worker=per_worker, service_s=service_s, min_workers=1)
    gate = GateView("d", rate=rate, concurrency=concurrency)
    (state,) = run([depth], Watermarks(hwm=100, lwm=10), gate=gate, policy=policy)
    assert state.quota_workers is not None
    assert state.desired_workers <= max(state.quota_workers, policy.min_workers)
    assert state.desired_workers <= max(state.backlog_workers, policy.min_workers)
    if concurrency:
        # A worker waiting on a lease holds no connection: the cap allows the workers
        # that keep every connection busy, plus one waiting — never more.
        assert state.quota_workers <= concurrency + 1


def test_a_capped_downstream_wants_more_workers_than_connections_and_says_why() -> None:
    """The TOS: 4 connections, 50 ms calls, 20 ms of bookkeeping per task. Four workers
    would keep the connections busy 5/7 of the time; the monitor asks for
    ceil(4 × 70 / 50) + 1 = 7 and names the connections as the reason."""
    policy = ScalingPolicy(backlog_per_worker=1, service_s=0.05, overhead_s=0.02)
    gate = GateView("tos", rate=1000.0, burst=100, concurrency=4)
    (state,) = run([1000], Watermarks(hwm=100, lwm=10), gate=gate, policy=policy)
    assert state.quota_workers == state.desired_workers == 7
    assert state.quota_reason == "connections: ceil(4 × (0.05 + 0.02) s / 0.05 s) + 1 spare = 7"


def test_overhead_lengthens_the_rate_based_figure_too() -> None:
    """Little's law over the whole cycle: 10/s × (0.5 + 0.1) s = 6 workers."""
    policy = ScalingPolicy(backlog_per_worker=1, service_s=0.5, overhead_s=0.1)
    (state,) = run(
        [1000], Watermarks(hwm=100, lwm=10), gate=GateView("c", rate=10.0), policy=policy
    )
    assert (state.quota_workers, state.quota_reason) == (6, "rate: ceil(10/s × (0.5 + 0.1) s) = 6")


def test_a_negative_overhead_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="overhead_s"):
        ScalingPolicy(overhead_s=-0.01)


def test_state_round_trips_through_its_dict() -> None:
    """What the monitor publishes is what producers read back."""
    (state,) = run([500], Watermarks(hwm=100, lwm=10), gate=GateView("g", rate=1, wait_s=5))
    assert LoadState.from_dict(state.as_dict()) == state
    assert state.level is Level.HIGH
