"""A gate that admits on the pause and the rate only (``leases=False``), on both backends.

The workers behind a relay are admitted by the downstream's gate for its fleet-wide
pause and its rate, but the relay's lanes hold the gate's concurrency leases: a worker
must neither take one nor wait for one. In every test below the one lease of the gate
is held by a normal gate of the same name, so a no-lease gate that took the cap into
account would be refused (or would wait) and the test would fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tidegate.errors import Throttled
from tidegate.flow import AsyncGate, Gate
from tidegate.flow.backends import ManualClock
from tidegate.settings import GatePolicy

#: One lease, a rate that does not get in the way (burst 10).
ONE_LEASE = GatePolicy(rate=100.0, burst=10, concurrency=1, lease_s=10)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def _pair(make: Callable[..., Any], policy: GatePolicy = ONE_LEASE) -> tuple[Gate, Gate]:
    """A normal gate that holds the one lease (a relay's lane), and a no-lease gate."""
    lane = make(Gate, "tos", policy=policy)
    held = lane.acquire(max_wait=0)
    assert held.leased
    return lane, make(Gate, "tos", policy=policy, leases=False)


# --- sync -------------------------------------------------------------------------------


def test_admitted_at_once_while_the_one_lease_is_held(make: Callable[..., Any]) -> None:
    """The cap is full (a normal gate is refused for it); the no-lease gate is admitted
    now, takes no lease, and the fleet still holds exactly the one."""
    lane, worker = _pair(make)
    assert lane.try_acquire().reason == "concurrency"

    decision = worker.try_acquire()
    permit = worker.acquire(max_wait=0)

    assert decision.allowed
    assert decision.reason == "admitted"
    assert decision.permit is None
    assert not permit.leased
    assert permit.waited_s == 0.0
    assert worker.state().leases_held == 1
    assert lane.state().leases_held == 1


def test_refused_and_waits_during_a_fleet_pause_like_the_normal_gate(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """A pause written by the normal gate refuses both alike (same reason, same wait);
    acquire waits the pause out and is then admitted without a lease."""
    lane, worker = _pair(make)
    lane.pause(2.0, "http_429")

    by_lane, by_worker = lane.try_acquire(), worker.try_acquire()
    with pytest.raises(Throttled) as info:
        worker.acquire(max_wait=1)
    start = clock.now_ms()
    permit = worker.acquire(max_wait=5)

    assert (by_worker.allowed, by_worker.reason) == (False, "paused")
    assert (by_lane.allowed, by_lane.reason) == (False, "paused")
    assert by_worker.wait_s == pytest.approx(by_lane.wait_s, abs=1e-3)
    assert by_worker.wait_s == pytest.approx(2.0, abs=1e-3)
    assert info.value.reason == "paused"
    assert permit.waited_s == pytest.approx(2.0, abs=1e-3)
    assert (clock.now_ms() - start) / 1000 == pytest.approx(2.0, abs=1e-3)
    assert not permit.leased
    assert worker.state().leases_held == 1


def test_obeys_the_rate(make: Callable[..., Any], clock: ManualClock) -> None:
    """Rate 2/s, burst 1: of two back-to-back admissions the second is reserved 0.5 s
    ahead; a try-only one in between is refused for the rate with 0.5 s to wait."""
    _, worker = _pair(make, GatePolicy(rate=2.0, burst=1, concurrency=1, lease_s=10))
    clock.advance(0.5)  # the lane's admission took the one token: refilled

    first = worker.acquire(max_wait=0)
    refused = worker.try_acquire()
    second = worker.acquire(max_wait=1)

    assert first.waited_s == 0.0
    assert (refused.allowed, refused.reason) == (False, "rate")
    assert refused.wait_s == pytest.approx(0.5, abs=1e-3)
    assert second.waited_s == pytest.approx(0.5, abs=1e-3)
    assert not first.leased
    assert not second.leased


def test_permit_has_nothing_to_release_and_each_admission_counts(
    make: Callable[..., Any],
) -> None:
    """release/renew of a no-lease permit do nothing (and leave the lane's lease alone);
    ``admitted_total`` grows by one per admission, try-only and slot included."""
    lane, worker = _pair(make)
    before = worker.admitted_total()

    permit = worker.acquire(max_wait=0)
    assert worker.admitted_total() == before + 1
    assert permit.release() is True
    assert permit.renew() is False  # no lease to extend
    assert permit.release() is True
    assert worker.try_acquire().allowed
    assert worker.admitted_total() == before + 2
    with worker.slot(max_wait=0) as in_slot:  # auto_renew on: nothing to renew
        assert not in_slot.leased
    assert worker.admitted_total() == before + 3

    assert lane.state().leases_held == 1
    assert lane.try_acquire().reason == "concurrency"


def test_a_live_concurrency_change_does_not_make_it_take_a_lease(
    make: Callable[..., Any],
) -> None:
    """Defaults without a cap; ``configure(concurrency=1)`` and the lane takes the one
    lease: the no-lease gate reads the live config and still takes none."""
    no_cap = GatePolicy(rate=100.0, burst=10, concurrency=0, lease_s=10)
    lane, worker = make(Gate, "tos", policy=no_cap), make(Gate, "tos", policy=no_cap, leases=False)
    lane.configure(concurrency=1)
    assert lane.acquire(max_wait=0).leased

    permit = worker.acquire(max_wait=0)
    decision = worker.try_acquire()

    assert not permit.leased
    assert decision.allowed
    assert decision.permit is None
    assert worker.state().policy.concurrency == 1
    assert worker.state().leases_held == 1


# --- asyncio ----------------------------------------------------------------------------


async def _async_pair(
    factory: Callable[[], Any], prefix: str, policy: GatePolicy = ONE_LEASE
) -> tuple[AsyncGate, AsyncGate]:
    backend = factory()
    lane = AsyncGate(backend, "tos", policy=policy, prefix=prefix)
    assert (await lane.acquire(max_wait=0)).leased
    return lane, AsyncGate(backend, "tos", policy=policy, prefix=prefix, leases=False)


def test_async_admitted_at_once_while_the_one_lease_is_held(
    async_backend_factory: Callable[[], Any], prefix: str
) -> None:
    """As the sync twin: admitted now, no lease, the fleet still holds the one."""

    async def scenario() -> tuple[str, bool, bool, int]:
        lane, worker = await _async_pair(async_backend_factory, prefix)
        refused = await lane.try_acquire()
        decision = await worker.try_acquire()
        permit = await worker.acquire(max_wait=0)
        assert decision.permit is None
        return refused.reason, decision.allowed, permit.leased, (await worker.state()).leases_held

    assert run(scenario()) == ("concurrency", True, False, 1)


def test_async_refused_and_waits_during_a_fleet_pause(
    async_backend_factory: Callable[[], Any], prefix: str
) -> None:
    """As the sync twin: refused like the normal gate, then waits the pause out."""

    async def scenario() -> tuple[Any, Any, float, bool]:
        lane, worker = await _async_pair(async_backend_factory, prefix)
        await lane.pause(2.0, "http_429")
        by_lane, by_worker = await lane.try_acquire(), await worker.try_acquire()
        async with worker.slot(max_wait=5) as permit:
            pass
        return by_lane, by_worker, permit.waited_s, permit.leased

    by_lane, by_worker, waited, leased = run(scenario())

    assert (by_worker.allowed, by_worker.reason) == (False, "paused")
    assert (by_lane.allowed, by_lane.reason) == (False, "paused")
    assert by_worker.wait_s == pytest.approx(2.0, abs=1e-3)
    assert waited == pytest.approx(2.0, abs=1e-3)
    assert not leased


def test_async_obeys_the_rate(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """As the sync twin: the second of two back-to-back admissions is 0.5 s ahead."""
    policy = GatePolicy(rate=2.0, burst=1, concurrency=1, lease_s=10)

    async def scenario() -> tuple[float, Any, float]:
        _, worker = await _async_pair(async_backend_factory, prefix, policy)
        clock.advance(0.5)
        first = await worker.acquire(max_wait=0)
        refused = await worker.try_acquire()
        second = await worker.acquire(max_wait=1)
        return first.waited_s, refused, second.waited_s

    first, refused, second = run(scenario())

    assert first == 0.0
    assert (refused.allowed, refused.reason) == (False, "rate")
    assert refused.wait_s == pytest.approx(0.5, abs=1e-3)
    assert second == pytest.approx(0.5, abs=1e-3)


def test_async_permit_has_nothing_to_release_and_each_admission_counts(
    async_backend_factory: Callable[[], Any], prefix: str
) -> None:
    """As the sync twin: release/renew do nothing; one count per admission."""

    async def scenario() -> tuple[list[int], list[bool], int, str]:
        lane, worker = await _async_pair(async_backend_factory, prefix)
        counts = [await worker.admitted_total()]
        permit = await worker.acquire(max_wait=0)
        counts.append(await worker.admitted_total())
        answers = [await permit.release(), await permit.renew(), await permit.release()]
        assert (await worker.try_acquire()).allowed
        counts.append(await worker.admitted_total())
        async with worker.slot(max_wait=0):
            pass
        counts.append(await worker.admitted_total())
        return counts, answers, (await lane.state()).leases_held, (await lane.try_acquire()).reason

    counts, answers, held, lane_reason = run(scenario())

    assert [c - counts[0] for c in counts] == [0, 1, 2, 3]
    assert answers == [True, False, True]
    assert held == 1
    assert lane_reason == "concurrency"


def test_async_a_live_concurrency_change_does_not_make_it_take_a_lease(
    async_backend_factory: Callable[[], Any], prefix: str
) -> None:
    """As the sync twin: a cap configured live is not taken by the no-lease gate."""
    no_cap = GatePolicy(rate=100.0, burst=10, concurrency=0, lease_s=10)

    async def scenario() -> tuple[bool, bool, int]:
        backend = async_backend_factory()
        lane = AsyncGate(backend, "tos", policy=no_cap, prefix=prefix)
        worker = AsyncGate(backend, "tos", policy=no_cap, prefix=prefix, leases=False)
        await lane.configure(concurrency=1)
        assert (await lane.acquire(max_wait=0)).leased
        permit = await worker.acquire(max_wait=0)
        return (
            permit.leased,
            (await worker.try_acquire()).allowed,
            (await worker.state()).leases_held,
        )

    assert run(scenario()) == (False, True, 1)


# --- the lanes' side: a lease without a rate token (tokens=False) ------------------------


def test_a_lane_takes_a_lease_without_a_rate_token(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Rate 1/s, burst 1: a worker takes the one token; a lane (``tokens=False``) is
    still admitted at once and holds a lease, and the worker's next token is due when
    it would have been without the lane — the lane's lease cost the rate nothing."""
    policy = GatePolicy(rate=1.0, burst=1, concurrency=2, lease_s=10)
    worker = make(Gate, "tos", policy=policy, leases=False)
    lane = make(Gate, "tos", policy=policy, tokens=False)

    worker.acquire(max_wait=0)
    held = lane.acquire(max_wait=0)
    refused = worker.try_acquire()

    assert held.leased
    assert held.waited_s == 0.0
    assert lane.state().leases_held == 1
    assert (refused.allowed, refused.reason) == (False, "rate")
    assert refused.wait_s == pytest.approx(1.0, abs=1e-3)


def test_a_lane_still_waits_for_a_lease_and_for_a_pause(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """The cap and the pause bind a lane as they bind any lease holder."""
    policy = GatePolicy(rate=1.0, burst=1, concurrency=1, lease_s=10)
    lane = make(Gate, "tos", policy=policy, tokens=False)
    first = lane.acquire(max_wait=0)

    assert lane.try_acquire().reason == "concurrency"
    first.release()
    lane.pause(2.0, "operator")
    assert lane.try_acquire().reason == "paused"
