"""The live loop's parts: the fleet's observation window, and decisions applied to a gate.

The window is a behaviour suite on memory and on a real Redis. The loop runs against a
real :class:`~tidegate.flow.Gate` on the same manual clock as the store, so the gate's
rate, pause and lease count are read back from the gate itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.adaptive import (
    PAUSE_REASON_QUOTA,
    AdaptiveController,
    AdaptiveKeys,
    AdaptivePolicy,
    AdaptiveStore,
    ConcurrencyPolicy,
    MemoryAdaptiveStore,
    Observations,
    RateLimitHint,
    RatePolicy,
    RedisAdaptiveStore,
    gate_saturated,
    windows,
)
from tidegate.flow.backends import ManualClock, MemoryBackend
from tidegate.keys import Keyspace
from tidegate.settings import GatePolicy

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]
T0 = 1_700_000_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=T0)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, clock: ManualClock) -> AdaptiveStore:
    if request.param == "memory":
        return MemoryAdaptiveStore(clock)
    return RedisAdaptiveStore(request.getfixturevalue("redis_client"), clock=clock)


@pytest.fixture
def keys(prefix: str) -> AdaptiveKeys:
    return Keyspace(prefix).adaptive("customs")


# -- the observation window ------------------------------------------------------------


def test_reports_add_up_and_a_drain_starts_a_new_window(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """Counts by outcome, latency total and minimum, the most leases, waits, last hint."""
    first = RateLimitHint(limit=600, window_s=60, remaining=10, reset_s=5)
    last = RateLimitHint(limit=600, window_s=60, remaining=9, reset_s=4)
    store.observe(keys, "ok", latency_ms=120.0, in_flight=3, held=True, hint=first)
    store.observe(keys, "ok", latency_ms=80.0, in_flight=5, hint=last)
    store.observe(keys, "throttled", in_flight=1)
    store.observe(keys, "unavailable", in_flight=2, held=True)

    observed = store.drain(keys)

    assert observed == Observations(
        ok=2,
        throttled=1,
        unavailable=1,
        held=2,
        latency_count=2,
        latency_sum_ms=200.0,
        latency_min_ms=80.0,
        max_in_flight=5,
        hint=last,
    )
    assert store.drain(keys) == Observations()


def test_a_429_leaves_one_wake_token_that_a_wait_or_the_drain_takes(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """The controller's loop waits on it between ticks: only a 429 leaves it (a success
    or a 503 does not), two 429s leave one, and the drain takes it with the window."""
    assert store.wait_rejection(keys, 0) is False
    store.observe(keys, "ok", latency_ms=10.0)
    store.observe(keys, "unavailable")
    assert store.wait_rejection(keys, 0) is False

    store.observe(keys, "throttled")
    store.observe(keys, "throttled")
    assert store.wait_rejection(keys, 0) is True
    assert store.wait_rejection(keys, 0) is False
    assert store.drain(keys).throttled == 2  # taking the token leaves the window

    store.observe(keys, "throttled")
    store.drain(keys)
    assert store.wait_rejection(keys, 0) is False


def test_a_wait_without_a_429_ends_empty_and_a_bad_timeout_is_refused(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    store.observe(keys, "ok", latency_ms=10.0)
    assert store.wait_rejection(keys, 0.05) is False
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigurationError):
            store.wait_rejection(keys, bad)


def test_a_wait_of_under_a_millisecond_looks_rather_than_blocking(
    store: AdaptiveStore, keys: AdaptiveKeys, request: pytest.FixtureRequest
) -> None:
    """The loop waits out the last sliver of its tick too. On Redis 6.2 a ``BLPOP`` of
    under a millisecond blocks forever (its timeout is truncated to 0): the wait failed
    at the client's socket timeout, and the controller's next tick came 6 s late (a
    slow start of × 2.25 in one decision, in ``tidegate demo --scenario adaptive``)."""
    if isinstance(store, RedisAdaptiveStore):
        # A short socket timeout, so that a wait that blocks fails within the test.
        client = client_from_url(request.getfixturevalue("redis_url"), socket_timeout=0.4)
        request.addfinalizer(client.close)
        store = RedisAdaptiveStore(client)
    for wait_s in (1e-3, 4e-4, 1e-6):
        assert store.wait_rejection(keys, wait_s) is False
    store.observe(keys, "throttled")
    assert store.wait_rejection(keys, 4e-4) is True


@pytest.mark.parametrize(
    ("outcome", "latency_ms", "in_flight"),
    [("late", None, 0), ("ok", 0.0, 0), ("ok", float("nan"), 0), ("ok", None, -1)],
)
def test_a_poisonous_report_is_refused(
    store: AdaptiveStore, keys: AdaptiveKeys, outcome: Any, latency_ms: Any, in_flight: Any
) -> None:
    """A report that would corrupt the window is a ConfigurationError; nothing counted."""
    with pytest.raises(ConfigurationError):
        store.observe(keys, outcome, latency_ms=latency_ms, in_flight=in_flight)
    assert store.drain(keys) == Observations()


def test_windows_give_the_sent_rate_and_the_mean_latency() -> None:
    """12 calls in 2 s: 6/s sent; two latencies 80 and 120 ms: mean 100, min 80."""
    observed = Observations(
        ok=10, throttled=2, latency_count=2, latency_sum_ms=200.0, latency_min_ms=80.0
    )

    rate, latency = windows(observed, elapsed_s=2.0)
    first, _ = windows(observed, elapsed_s=None)

    assert (rate.successes, rate.throttled, rate.sent_rate) == (10, 2, 6.0)
    assert not rate.saturated
    assert first.sent_rate is None
    assert (latency.samples, latency.latency_ms, latency.min_latency_ms) == (2, 100.0, 80.0)


def test_a_wait_at_the_gate_or_a_full_gate_means_saturated() -> None:
    """held > 0 (a worker waited for a token) or the gate's own view: saturated."""
    assert windows(Observations(ok=1, held=1), elapsed_s=1.0)[0].saturated
    assert windows(Observations(ok=1), elapsed_s=1.0, saturated=True)[0].saturated
    assert not windows(Observations(ok=1), elapsed_s=1.0)[0].saturated


# -- decisions applied to the gate -----------------------------------------------------

CUSTOMS = AdaptivePolicy(
    rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True, increase_per_s=0.5)
)


@pytest.fixture
def gate(clock: ManualClock, prefix: str) -> Gate:
    return Gate(MemoryBackend(clock), "customs", policy=GatePolicy(rate=1.0), prefix=prefix)


@pytest.fixture
def controller(store: AdaptiveStore, prefix: str) -> Callable[..., AdaptiveController]:
    def make(policy: AdaptivePolicy = CUSTOMS, holder: str = "w0") -> AdaptiveController:
        return AdaptiveController(store, "customs", policy, prefix=prefix, holder=holder)

    return make


def test_saturated_success_raises_the_gates_rate(
    controller: Callable[..., AdaptiveController], gate: Gate, clock: ManualClock
) -> None:
    """Workers report calls that waited at the gate: the gate's own rate goes up."""
    leader = controller()
    leader.run_once(gate)  # elected; the first window has no length yet
    for _ in range(4):
        clock.advance(1)
        leader.report("ok", latency_ms=40.0, held=True)
        leader.run_once(gate)

    assert gate.state().policy.rate == pytest.approx(5.0625)  # 1 × 1.5⁴, the slow start
    assert "rate" in gate.state().overridden


def test_a_429_cuts_the_gates_rate_under_a_ceiling(
    controller: Callable[..., AdaptiveController], gate: Gate, clock: ManualClock
) -> None:
    """At 10/s the fleet sent 2 calls in a second, one refused: the 429 counts at the
    2/s actually sent, the ceiling and the gate go just under it (1.8/s)."""
    gate.configure(rate=10.0)
    leader = controller()
    leader.store.elect(leader.keys, "w0", 10_000)
    leader.store.save(leader.keys, "w0", _record(rate=10.0))
    leader.run_once(gate)
    clock.advance(1)
    leader.report("ok", latency_ms=40.0)
    leader.report("throttled")

    tick = leader.run_once(gate)

    assert tick is not None
    assert tick.rate is not None
    assert tick.rate.reason == "throttled"
    assert gate.state().policy.rate == pytest.approx(1.8)
    assert tick.rate.state.ceiling == pytest.approx(1.8)


def test_an_exhausted_quota_pauses_the_gate_until_the_reset(
    controller: Callable[..., AdaptiveController], gate: Gate
) -> None:
    """The last answer said 0 left, reset in 7 s: the whole fleet waits 7 s."""
    leader = controller()
    leader.report("ok", latency_ms=30.0, hint=RateLimitHint(limit=100, remaining=0, reset_s=7))

    leader.run_once(gate)

    state = gate.state()
    assert state.pause_reason == PAUSE_REASON_QUOTA
    assert state.paused_for_s == pytest.approx(7.0)


def test_the_latency_gradient_sets_the_gates_lease_count(
    controller: Callable[..., AdaptiveController], gate: Gate, clock: ManualClock
) -> None:
    """A TOS at 16 leases whose latency went from 50 to 300 ms: the gate gets fewer."""
    tos = controller(
        AdaptivePolicy(
            concurrency=ConcurrencyPolicy(start_concurrency=16, max_concurrency=32, min_samples=1)
        )
    )
    clock.advance(1)
    tos.report("ok", latency_ms=50.0, in_flight=4)
    tos.run_once(gate)  # the floor: 50 ms
    assert gate.state().policy.concurrency == 16
    clock.advance(1)
    for _ in range(3):
        tos.report("ok", latency_ms=300.0, in_flight=16)

    tos.run_once(gate)

    assert gate.state().policy.concurrency == 15  # 0.8·16 + 0.2·(16·0.5 + 4) = 15.2


def test_only_the_leader_drains_the_fleets_window(
    controller: Callable[..., AdaptiveController], gate: Gate, store: AdaptiveStore
) -> None:
    """A standby's run_once neither decides nor eats the reports meant for the leader."""
    leader, standby = controller(holder="a"), controller(holder="b")
    leader.run_once(gate)
    standby.report("throttled")

    assert standby.run_once(gate) is None
    assert store.drain(standby.keys).throttled == 1


def test_a_gate_with_reservations_ahead_is_saturated(gate: Gate) -> None:
    """rate 1/s, burst 1: one admission is free; a second reserved 1 s ahead means a
    caller now would wait."""
    assert not gate_saturated(gate)
    gate.acquire(max_wait=5)
    gate.acquire(max_wait=5)

    assert gate_saturated(gate)


def test_the_loop_logs_one_event_per_change_and_the_gate_its_own(
    controller: Callable[..., AdaptiveController], gate: Gate, clock: ManualClock
) -> None:
    """A rate change gives adaptive_rate_changed (with the reason) and the gate's
    downstream_gate_configured; an unchanged tick gives neither."""
    leader = controller()
    leader.run_once(gate)
    clock.advance(1)
    leader.report("ok", latency_ms=20.0, held=True)
    with capture_logs() as logs:
        leader.run_once(gate)
        clock.advance(1)
        leader.run_once(gate)  # nothing reported: nothing learned

    assert [e["event"] for e in logs] == ["adaptive_rate_changed", "downstream_gate_configured"]
    assert logs[0]["reason"] == "increase"


def _record(rate: float) -> Any:
    from tidegate.flow.adaptive import AdaptiveRecord, RateState

    return AdaptiveRecord(rate=RateState(rate=rate))


# -- the closed loop against the customs sim --------------------------------------------


def closed_loop(quota_headers: Any, seconds: float = 300.0) -> dict[str, Any]:
    """One worker with a backlog, the gate, the controller and the real CustomsSim over
    HTTP, all on one manual clock (the gate's waits advance it: nothing sleeps).

    The sim enforces 10/s, 4/s from t = 100 s for a minute, then 10/s again, and
    suspends a sender after 5 429s within 10 s. A 429 pauses the gate for its
    Retry-After and the unit is sent again, as the downstream client does.
    """
    import httpx

    from tidegate.downstream import classify_response, parse_rate_limit_headers
    from tidegate.sim import CustomsSim

    clock = ManualClock(start_ms=T0)
    policy = AdaptivePolicy(
        rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True, increase_per_s=0.5)
    )
    gate = Gate(MemoryBackend(clock), "customs", policy=GatePolicy(rate=1.0), prefix="loop")
    controller = AdaptiveController(MemoryAdaptiveStore(clock), "customs", policy, holder="w")
    accepted: list[float] = []
    throttled: list[float] = []
    rates: list[float] = []
    with (
        CustomsSim(
            10.0,
            1,
            schedule=[(100.0, 4.0), (160.0, 10.0)],
            suspend_after=5,
            suspend_window_s=10.0,
            quota_headers=quota_headers,
            clock=lambda: clock.now_ms() / 1000.0,
        ) as sim,
        httpx.Client() as http,
    ):
        next_tick, sent = T0, 0
        while clock.now_ms() - T0 < seconds * 1000.0:
            while clock.now_ms() >= next_tick:
                controller.run_once(gate)
                rates.append(gate.state().policy.rate)
                next_tick += 1000.0
            permit = gate.acquire(max_wait=60)
            while clock.now_ms() >= next_tick:  # the tick thread runs during the wait
                controller.run_once(gate)
                rates.append(gate.state().policy.rate)
                next_tick += 1000.0
            sent += 1
            answer = http.post(
                sim.endpoint, json={"n": sent}, headers={"Idempotency-Key": f"k{sent}"}
            )
            permit.release()
            at = (clock.now_ms() - T0) / 1000.0
            outcome = classify_response("customs", answer.status_code, answer.headers, now=0.0)
            hint = parse_rate_limit_headers(answer.headers, now=0.0)
            if outcome.kind == "throttled":
                assert outcome.retry_after_s is not None
                gate.pause(outcome.retry_after_s, "http_429")
                controller.report("throttled", held=permit.waited_s > 0, hint=hint)
                throttled.append(at)
                continue
            controller.report("ok", latency_ms=5.0, held=permit.waited_s > 0, hint=hint)
            accepted.append(at)
        suspensions = sim.stats(timeline=False)["suspensions"]
    return {
        "accepted": accepted,
        "throttled": throttled,
        "rates": rates,
        "suspensions": suspensions,
    }


def per_second(times: list[float], start: float, end: float) -> float:
    return sum(1 for t in times if start <= t < end) / (end - start)


def test_closed_loop_without_headers_learns_the_schedule_from_429s_alone() -> None:
    """Never told the capacity, through the real gate and the real sim over HTTP: no
    suspension, ~90 % of the 10/s used, under 4/s in the dip, back near 10/s after it.

    The 429s come in pairs here (1.5 % of the calls): this single-threaded harness
    ticks between calls, so the slot reserved right after a failed probe's pause is
    still spaced at the probe's rate. A worker's tick thread runs during the pause;
    ``bench/adaptive.py`` measures that case.
    """
    run = closed_loop("none")

    assert run["suspensions"] == 0
    assert len(run["throttled"]) <= 0.02 * len(run["accepted"])
    # The discovery: the slow start's pair and at most one failed probe's pair (its
    # first probe comes sooner since the start's ceiling is the rate proven clean).
    assert sum(1 for t in run["throttled"] if t < 20) <= 4
    assert per_second(run["accepted"], 20, 100) >= 8.5
    assert per_second(run["accepted"], 110, 160) <= 4.0
    assert sum(1 for t in run["throttled"] if 100 <= t < 160) <= 8  # the fall, 3 probes
    assert per_second(run["accepted"], 200, 300) >= 8.0
    assert max(run["rates"][:100]) <= 10.0 * 1.5  # one probe's factor at most


def test_closed_loop_with_a_quota_header_needs_no_429_to_find_the_rate() -> None:
    """The sim advertises X-RateLimit-Limit-Minute: 600: the gate is at 9.5/s from its
    second tick, with no 429 at all before the unannounced dip."""
    run = closed_loop("minute")

    assert [t for t in run["throttled"] if t < 100] == []
    assert run["rates"][2] == pytest.approx(9.5)
    assert per_second(run["accepted"], 5, 100) >= 9.0
    assert run["suspensions"] == 0


def test_a_frozen_controller_leaves_a_hand_set_gate_alone(
    controller: Callable[..., AdaptiveController], gate: Gate, clock: ManualClock
) -> None:
    """Frozen, an operator sets the gate to 2.5/s by hand: the controller's ticks keep
    it (they would otherwise put back the learned 1/s)."""
    leader = controller(AdaptivePolicy(mode="frozen", rate=CUSTOMS.rate))
    leader.run_once(gate)
    gate.configure(rate=2.5)
    clock.advance(1)
    leader.report("throttled")

    tick = leader.run_once(gate)

    assert tick is not None
    assert tick.rate is not None
    assert tick.rate.reason == "frozen"
    assert gate.state().policy.rate == 2.5
