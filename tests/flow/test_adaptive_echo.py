"""A call's admission time, from the gate through the downstream report to the controller.

The rate maths set aside the 429s of calls admitted before the last cut
(``test_adaptive_rate.py``); these tests check that the time gets there: the gate's
permit and slot carry it, the client's observer picks it up inside the slot, both
stores keep it in the fleet's window, and the elected controller names the echo
instead of cutting again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis
from structlog.testing import capture_logs

from tidegate.downstream import DownstreamClient
from tidegate.errors import ConfigurationError, DownstreamThrottled
from tidegate.flow import AsyncGate, Gate
from tidegate.flow._admitted import admitted_ms
from tidegate.flow.adaptive import (
    AdaptiveController,
    AdaptiveKeys,
    AdaptivePolicy,
    AdaptiveRecord,
    AdaptiveReporter,
    AdaptiveStore,
    MemoryAdaptiveStore,
    RatePolicy,
    RateState,
    RedisAdaptiveStore,
    windows,
)
from tidegate.flow.backends import ManualClock, MemoryBackend
from tidegate.settings import GatePolicy

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]
T0 = 1_700_000_000_000.0
CUSTOMS = AdaptivePolicy(rate=RatePolicy(min_rate=1.0, max_rate=50.0, suspension_prone=True))


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
    return AdaptiveKeys.build("customs", prefix=prefix)


@pytest.fixture
def gate(clock: ManualClock, prefix: str) -> Gate:
    return Gate(MemoryBackend(clock), "customs", policy=GatePolicy(rate=10.0), prefix=prefix)


# -- the gate ----------------------------------------------------------------------------


def test_a_permit_carries_the_decision_time_not_the_slot(gate: Gate, clock: ManualClock) -> None:
    """Two calls at once through 10/s with a burst of 1: the second is admitted now,
    for a slot 100 ms ahead (it sleeps until then). Its rate was fixed at admission,
    so that is the time it carries."""
    first = gate.acquire()
    second = gate.acquire()

    assert first.admitted_ms == T0
    assert second.waited_s == pytest.approx(0.1)
    assert second.admitted_ms == T0
    assert clock.now_ms() == pytest.approx(T0 + 100.0)


def test_a_slot_makes_its_admission_time_visible_to_the_code_inside_it(
    gate: Gate, clock: ManualClock, prefix: str
) -> None:
    """Inside ``gate.slot()`` (and only there) ``admitted_ms(name)`` answers; another
    gate's slot nested inside keeps its own."""
    tos = Gate(MemoryBackend(clock), "tos", policy=GatePolicy(rate=10.0), prefix=prefix)
    assert admitted_ms("customs") is None
    with gate.slot():
        clock.advance(0.5)
        with tos.slot():
            assert admitted_ms("tos") == T0 + 500.0
            assert admitted_ms("customs") == T0
        assert admitted_ms("tos") is None
    assert admitted_ms("customs") is None


def test_an_async_slot_carries_it_too(clock: ManualClock, prefix: str) -> None:
    """The asyncio twin sets the same context variable, per task."""
    gate = AsyncGate(MemoryBackend(clock), "customs", policy=GatePolicy(rate=10.0), prefix=prefix)

    async def call() -> float | None:
        async with gate.slot():
            return admitted_ms("customs")

    assert asyncio.run(call()) == T0


@pytest.mark.redis
def test_a_redis_gate_stamps_with_the_fleet_clock(redis_client: redis.Redis, prefix: str) -> None:
    """On Redis the time is the script's own ``TIME`` — the clock the controller cuts by."""
    gate = Gate(redis_client, "customs", policy=GatePolicy(rate=10.0), prefix=prefix)
    store = RedisAdaptiveStore(redis_client)
    before = store.now_ms()
    with gate.slot() as permit:
        inside = admitted_ms("customs")
    after = store.now_ms()

    assert inside == permit.admitted_ms
    assert inside is not None
    assert before <= inside <= after


# -- the fleet's window ------------------------------------------------------------------


def test_the_window_keeps_the_latest_admission_of_its_429s(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """Only 429s' times are kept, and the latest of them: the window is an echo only if
    even its latest throttled call was admitted before the cut."""
    store.observe(keys, "throttled", admitted_ms=T0 - 300)
    store.observe(keys, "throttled", admitted_ms=T0 - 100)
    store.observe(keys, "ok", latency_ms=20.0, admitted_ms=T0 + 5_000)

    obs = store.drain(keys)
    rate, _ = windows(obs, elapsed_s=1.0)

    assert obs.throttled_stamped == 2
    assert rate.throttled == 2
    assert rate.throttled_admitted_ms == T0 - 100


def test_one_429_without_its_admission_time_makes_the_window_news(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """An observer outside a slot reports no time; that 429 may be fresh, so the window
    claims none and every 429 in it counts (as before admission times existed)."""
    store.observe(keys, "throttled", admitted_ms=T0 - 300)
    store.observe(keys, "throttled")

    rate, _ = windows(store.drain(keys), elapsed_s=1.0)

    assert rate.throttled == 2
    assert rate.throttled_admitted_ms is None


def test_the_window_keeps_the_latest_admission_of_its_503s_too(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """A 503 (or a refused call) of a call admitted before a cut is an echo of the rate
    before it as much as a 429 is: its admission time reaches the window too, kept
    apart from the 429s'."""
    store.observe(keys, "unavailable", admitted_ms=T0 - 200)
    store.observe(keys, "unavailable", admitted_ms=T0 - 50)
    store.observe(keys, "throttled", admitted_ms=T0 - 400)

    obs = store.drain(keys)
    rate, _ = windows(obs, elapsed_s=1.0)

    assert (obs.unavailable_stamped, obs.throttled_stamped) == (2, 1)
    assert rate.unavailable_admitted_ms == T0 - 50
    assert rate.throttled_admitted_ms == T0 - 400


def test_one_503_without_its_admission_time_makes_the_window_news(
    store: AdaptiveStore, keys: AdaptiveKeys
) -> None:
    """As for 429s: an unstamped 503 may be fresh, so no time is claimed."""
    store.observe(keys, "unavailable", admitted_ms=T0 - 300)
    store.observe(keys, "unavailable")

    rate, _ = windows(store.drain(keys), elapsed_s=1.0)

    assert rate.unavailable == 2
    assert rate.unavailable_admitted_ms is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "soon"])
def test_a_nonsense_admission_time_is_refused(
    store: AdaptiveStore, keys: AdaptiveKeys, bad: Any
) -> None:
    """A bug upstream, not a signal: refused before it reaches the window."""
    with pytest.raises(ConfigurationError):
        store.observe(keys, "throttled", admitted_ms=bad)


# -- the controller ----------------------------------------------------------------------


@pytest.fixture
def leader(store: AdaptiveStore, prefix: str) -> AdaptiveController:
    controller = AdaptiveController(store, "customs", CUSTOMS, prefix=prefix, holder="w0")
    store.elect(controller.keys, "w0", 10_000)
    store.save(controller.keys, "w0", AdaptiveRecord(rate=RateState(rate=10.0)))
    return controller


def _throttled_inside(
    gate: Gate, reporter: AdaptiveReporter, clock: ManualClock, after_s: float = 0.0
) -> None:
    """One call through the gate's slot that the downstream answers 429, ``after_s``
    after it was admitted (the client's observer reports it inside the slot)."""
    with gate.slot():
        clock.advance(after_s)
        reporter.observe("throttled", latency_ms=15.0, hint=None)


def test_the_echo_of_a_cut_is_logged_and_cuts_nothing(
    leader: AdaptiveController, gate: Gate, clock: ManualClock
) -> None:
    """A 429 cuts the gate from 10/s; a second call, admitted before that cut, draws
    its 429 after it. The next tick names it (one ``adaptive_rate_stale_rejection``
    event, kept in the history) and leaves the gate's rate and the ceiling alone."""
    reporter = AdaptiveReporter(leader, gate)
    leader.run_once(gate)
    clock.advance(1)
    _throttled_inside(gate, reporter, clock)
    with gate.slot():  # admitted now, before the cut; its answer comes later
        cut = leader.run_once(gate)
        clock.advance(1)
        reporter.observe("throttled", latency_ms=900.0, hint=None)

    assert cut is not None
    assert cut.rate is not None
    assert cut.rate.reason == "throttled"
    cut_rate = gate.state().policy.rate
    with capture_logs() as logs:
        echo = leader.run_once(gate)

    assert echo is not None
    assert echo.rate is not None
    assert echo.rate.reason == "throttled_stale"
    assert gate.state().policy.rate == cut_rate
    assert echo.rate.state.ceiling == cut.rate.state.ceiling
    stale = [e for e in logs if e["event"] == "adaptive_rate_stale_rejection"]
    assert len(stale) == 1
    assert stale[0]["throttled"] == 1
    assert stale[0]["rate"] == pytest.approx(cut_rate)
    assert leader.history(1)[0]["reason"] == "throttled_stale"


def test_a_429_of_a_call_admitted_after_the_cut_cuts_again(
    leader: AdaptiveController, gate: Gate, clock: ManualClock
) -> None:
    """The same sequence, but the second call was admitted after the cut (and after
    the old interval): its 429 is about the new rate, which is too high too."""
    reporter = AdaptiveReporter(leader, gate)
    leader.run_once(gate)
    clock.advance(1)
    _throttled_inside(gate, reporter, clock)
    leader.run_once(gate)
    cut_rate = gate.state().policy.rate
    clock.advance(1)
    _throttled_inside(gate, reporter, clock, after_s=0.1)

    again = leader.run_once(gate)

    assert again is not None
    assert again.rate is not None
    assert again.rate.reason == "throttled"
    assert gate.state().policy.rate < cut_rate


def test_the_echo_of_a_503_cut_is_logged_and_cuts_nothing(
    leader: AdaptiveController, gate: Gate, clock: ManualClock
) -> None:
    """A 503 cuts the gate from 10/s (x0.7); a call admitted before that cut draws its
    503 after it. The next tick names it (``unavailable_stale``, one
    ``adaptive_rate_stale_rejection`` event) and leaves the rate alone — before, it
    cut again to 4.9/s, and a third echo to 3.4/s."""
    reporter = AdaptiveReporter(leader, gate)
    leader.run_once(gate)
    clock.advance(1)
    with gate.slot():
        reporter.observe("unavailable", latency_ms=15.0, hint=None)
    with gate.slot():  # admitted now, before the cut; its answer comes later
        cut = leader.run_once(gate)
        clock.advance(1)
        reporter.observe("unavailable", latency_ms=900.0, hint=None)

    assert cut is not None
    assert cut.rate is not None
    assert cut.rate.reason == "unavailable"
    cut_rate = gate.state().policy.rate
    assert cut_rate == pytest.approx(7.0)
    with capture_logs() as logs:
        echo = leader.run_once(gate)

    assert echo is not None
    assert echo.rate is not None
    assert echo.rate.reason == "unavailable_stale"
    assert gate.state().policy.rate == cut_rate
    stale = [e for e in logs if e["event"] == "adaptive_rate_stale_rejection"]
    assert len(stale) == 1
    assert (stale[0]["unavailable"], stale[0]["throttled"]) == (1, 0)


def test_a_503_of_a_call_admitted_after_the_cut_cuts_again(
    leader: AdaptiveController, gate: Gate, clock: ManualClock
) -> None:
    """Admitted after the cut (and after the old interval): news about the new rate."""
    reporter = AdaptiveReporter(leader, gate)
    leader.run_once(gate)
    clock.advance(1)
    with gate.slot():
        reporter.observe("unavailable", latency_ms=15.0, hint=None)
    leader.run_once(gate)
    cut_rate = gate.state().policy.rate
    clock.advance(1)
    with gate.slot():
        clock.advance(0.1)
        reporter.observe("unavailable", latency_ms=15.0, hint=None)

    again = leader.run_once(gate)

    assert again is not None
    assert again.rate is not None
    assert again.rate.reason == "unavailable"
    assert gate.state().policy.rate < cut_rate


def test_a_call_that_waited_in_its_slot_is_reported_held(
    store: AdaptiveStore, gate: Gate, clock: ManualClock, prefix: str
) -> None:
    """The gate, not demand, set the pace of a call that waited for its slot: the
    reporter says so (``held``), and the window is saturated — so a 429 in it is judged
    at the gate's rate, not at the rate measured through a pause."""
    controller = AdaptiveController(store, "customs", CUSTOMS, prefix=prefix, holder="w0")
    reporter = AdaptiveReporter(controller, gate)
    with gate.slot():
        reporter.observe("ok", latency_ms=10.0, hint=None)
    first, _ = windows(store.drain(controller.keys), elapsed_s=1.0)
    with gate.slot(), gate.slot() as second:
        reporter.observe("ok", latency_ms=10.0, hint=None)
    held, _ = windows(store.drain(controller.keys), elapsed_s=1.0)

    assert second.waited_s > 0
    assert not first.saturated
    assert held.saturated


# -- the downstream client ---------------------------------------------------------------


class Recorder:
    """A ``CallObserver`` that keeps what the reporter would send."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None]] = []

    def observe(self, outcome: Any, *, latency_ms: float | None, hint: Any) -> None:
        self.seen.append((outcome, admitted_ms("customs")))


def test_the_clients_observer_sees_the_admission_of_the_slot_around_the_call(
    gate: Gate, clock: ManualClock
) -> None:
    """``with gate.slot(): client.send(...)`` — the application code between gate and
    client passes nothing along, and the observer still knows when the call was
    admitted; outside a slot it does not."""
    observer = Recorder()
    transport = httpx.MockTransport(lambda request: httpx.Response(429, json={}))
    client = DownstreamClient("customs", "http://customs", transport=transport, observer=observer)
    send: Callable[[], object] = lambda: client.send("/d", {"n": 1}, idempotency_key="k-1")  # noqa: E731
    with client:
        clock.advance(2)
        with gate.slot(), pytest.raises(DownstreamThrottled):
            send()
        with pytest.raises(DownstreamThrottled):
            send()

    assert observer.seen == [("throttled", T0 + 2_000.0), ("throttled", None)]
