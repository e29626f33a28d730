"""ConcurrencyLimiter and Gate behaviour on both backends, with a manual clock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from tidegate.errors import ConfigurationError, Throttled
from tidegate.flow import ConcurrencyLimiter, Gate
from tidegate.flow.backends import ManualClock
from tidegate.settings import GatePolicy


def test_cap_admits_limit_holders_then_refuses(make: Callable[..., Any]) -> None:
    """`limit` permits at once; the next try is refused with reason "concurrency"."""
    sem = make(ConcurrencyLimiter, "tos", limit=2, lease_s=10)

    first, second = sem.acquire(max_wait=0), sem.acquire(max_wait=0)
    third = sem.try_acquire()

    assert first.leased
    assert second.leased
    assert third is None
    with pytest.raises(Throttled) as info:
        sem.acquire(max_wait=0)
    assert info.value.reason == "concurrency"


def test_release_frees_the_slot(make: Callable[..., Any]) -> None:
    """Releasing a permit lets the next holder in; releasing twice is harmless."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=10)
    permit = sem.acquire(max_wait=0)

    assert permit.release() is True
    assert permit.release() is True
    assert sem.try_acquire() is not None


def test_slot_context_releases_on_error(make: Callable[..., Any]) -> None:
    """The lease is released in `finally`, also when the downstream call raises."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=10)

    with pytest.raises(RuntimeError), sem.slot(max_wait=0, auto_renew=False):
        raise RuntimeError("downstream exploded")

    assert sem.try_acquire() is not None


def test_expired_lease_of_a_dead_holder_is_reclaimed(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """A holder that never releases (killed) loses its slot when its lease expires."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=5)
    sem.acquire(max_wait=0)  # never released: the holder "died"
    assert sem.try_acquire() is None

    clock.advance(5.001)
    with capture_logs() as logs:
        permit = sem.acquire(max_wait=0)

    assert permit.leased
    reclaimed = [e for e in logs if e["event"] == "gate_lease_reclaimed"]
    assert reclaimed == [
        {
            "event": "gate_lease_reclaimed",
            "component": "tidegate.flow",
            "downstream": "tos",
            "leases": 1,
            "log_level": "warning",
        }
    ]


def test_renewed_lease_outlives_its_first_expiry(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """A long call that renews keeps its slot past the original lease."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=5)
    permit = sem.acquire(max_wait=0)

    clock.advance(4)
    assert permit.renew() is True
    clock.advance(4)  # 8 s after acquiring: the original lease would be gone

    assert sem.try_acquire() is None
    assert permit.release() is True


def test_renewing_a_lost_lease_says_so(make: Callable[..., Any], clock: ManualClock) -> None:
    """A holder that overran its lease learns it, instead of believing it still holds it."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=1)
    permit = sem.acquire(max_wait=0)
    clock.advance(2)

    assert permit.renew() is False
    assert permit.release() is True  # release after loss is a no-op, not an error


def test_waiter_gets_the_slot_when_the_lease_expires(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """acquire() with a budget waits for the slot instead of failing at once."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=3)
    sem.acquire(max_wait=0)
    start = clock.now_ms()

    permit = sem.acquire(max_wait=10)

    assert permit.leased
    assert 3.0 <= (clock.now_ms() - start) / 1000 < 10


def test_gate_combines_rate_and_concurrency(make: Callable[..., Any]) -> None:
    """Whichever part is tighter refuses; a refusal by rate takes no lease."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=1.0, burst=2, concurrency=1, lease_s=10))

    first = gate.try_acquire()
    by_concurrency = gate.try_acquire()
    assert first.allowed
    assert first.permit is not None
    assert by_concurrency.reason == "concurrency"

    first.permit.release()
    second = gate.try_acquire()
    assert second.allowed
    assert second.permit is not None
    second.permit.release()
    by_rate = gate.try_acquire()
    assert by_rate.reason == "rate"
    assert gate.state().leases_held == 0


def test_pause_stops_every_admission_until_it_ends(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """A pause (e.g. a 429 Retry-After) refuses tries and makes acquires wait it out."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=100.0, burst=10))
    with capture_logs() as logs:
        gate.pause(5.0, "http_429")
    paused = gate.try_acquire()
    start = clock.now_ms()

    permit = gate.acquire(max_wait=10)

    assert paused.reason == "paused"
    assert paused.wait_s == pytest.approx(5.0, abs=1e-3)
    assert (clock.now_ms() - start) / 1000 == pytest.approx(5.0, abs=1e-3)
    assert permit.waited_s == pytest.approx(5.0, abs=1e-3)
    assert logs[0]["event"] == "downstream_gate_paused"
    assert logs[0]["reason"] == "http_429"


def test_pause_longer_than_max_wait_raises(make: Callable[..., Any]) -> None:
    """A worker with a short budget is told to park, not kept waiting."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=100.0, burst=10))
    gate.pause(60.0, "http_429")

    with pytest.raises(Throttled) as info:
        gate.acquire(max_wait=1.0)

    assert info.value.reason == "paused"
    assert info.value.wait_s == pytest.approx(60.0, abs=1e-2)


def test_pause_is_extended_never_shortened(make: Callable[..., Any]) -> None:
    """Two 429s with different Retry-After: the fleet waits for the later one."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=1.0, burst=1))

    gate.pause(30.0, "http_429")
    remaining = gate.pause(2.0, "http_429")

    assert remaining == pytest.approx(30.0, abs=1e-2)
    gate.resume()
    assert gate.state().paused_for_s == 0
    assert gate.try_acquire().allowed


def test_live_retune_applies_to_every_gate_object(backend: Any, prefix: str) -> None:
    """`configure` on one process's gate changes the policy that every process uses."""
    operator = Gate(backend, "customs", policy=GatePolicy(rate=1.0, burst=1), prefix=prefix)
    worker = Gate(backend, "customs", policy=GatePolicy(rate=1.0, burst=1), prefix=prefix)

    state = operator.configure(burst=3)

    assert state.policy.burst == 3
    assert state.overridden == ("burst",)
    assert [worker.try_acquire().allowed for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize(
    "change",
    [{"rate": 0}, {"rate": -2.0}, {"burst": 0}, {"concurrency": -1}, {"lease_s": 0}, {}],
)
def test_invalid_retune_is_refused_and_changes_nothing(
    make: Callable[..., Any], change: dict[str, Any]
) -> None:
    """A bad operator value never reaches the running fleet."""
    gate = make(Gate, "customs", policy=GatePolicy(rate=1.0, burst=2))

    with pytest.raises(ConfigurationError):
        gate.configure(**change)

    assert gate.state().overridden == ()


def test_gate_defaults_come_from_the_environment(
    backend: Any, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TIDEGATE_<NAME>_RATE / _BURST / _CONCURRENCY give a gate its default shape."""
    monkeypatch.setenv("TIDEGATE_CUSTOMS_RATE", "0.5")
    monkeypatch.setenv("TIDEGATE_CUSTOMS_BURST", "2")
    monkeypatch.setenv("TIDEGATE_CUSTOMS_CONCURRENCY", "4")

    state = Gate(backend, "customs", prefix=prefix).state()

    assert (state.policy.rate, state.policy.burst, state.policy.concurrency) == (0.5, 2, 4)
    assert state.tokens_available == 2


def test_malformed_environment_default_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A typo in the environment fails at start-up, naming the variable."""
    monkeypatch.setenv("TIDEGATE_CUSTOMS_RATE", "fast")

    with pytest.raises(ConfigurationError, match="TIDEGATE_CUSTOMS_RATE"):
        Gate("memory://", "customs")


def test_held_slots_share_one_renewer_thread(make: Callable[..., Any]) -> None:
    """Each slot used to start a renewer thread of its own, inside the slot: on a busy
    host ``Thread.start`` cost milliseconds of every call with the lease held and no
    request in service. Three slots held at once are renewed by one thread."""
    sem = make(ConcurrencyLimiter, "tos", limit=3, lease_s=30)

    with sem.slot(max_wait=0), sem.slot(max_wait=0), sem.slot(max_wait=0):
        renewers = [t for t in threading.enumerate() if t.name.startswith("tidegate-renew")]

    assert len(renewers) == 1
    assert renewers[0].daemon
