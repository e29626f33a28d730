"""A permit renews the lease its admission took: the live ``lease_s``, not the default.

``gate_acquire.lua`` gives a new lease the live length (``tidegate gate set NAME
--lease-s``, :meth:`Gate.configure`), which overrides the process's default (its
policy). A permit that knew only the default renewed every third of *that* and
extended by it: with a live lease under a third of the default, a held lease expired
before its first renewal, another worker reclaimed it and two ran at once, over the
cap; with a live lease longer than the default, a renewal shortened it.

Every test here has a policy default and a live value far apart, so a permit that
followed the default would fail it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
import redis.asyncio

from tidegate.flow import AsyncGate, ConcurrencyLimiter, Gate
from tidegate.flow.backends import AsyncMemoryBackend, ManualClock, MemoryBackend
from tidegate.flow.backends.redis import AsyncRedisBackend, RedisBackend
from tidegate.harness.polling import wait_for
from tidegate.settings import GatePolicy

#: One lease, a rate that does not get in the way, and a default lease of 30 s.
DEFAULT_30 = GatePolicy(rate=100.0, burst=10, concurrency=1, lease_s=30.0)
#: The same with a default lease of 1 s.
DEFAULT_1 = GatePolicy(rate=100.0, burst=10, concurrency=1, lease_s=1.0)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


# --- sync, manual clock -----------------------------------------------------------------


def test_a_shorter_live_lease_is_renewed_by_its_own_length(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Live 1 s, default 30 s: the permit's lease is 1 s; renewed at 0.5 s it outlives
    its first expiry (1.0 s) and keeps the one slot, and it ends 1 s after that
    renewal (1.5 s), not 30 s."""
    gate = make(Gate, "tos", policy=DEFAULT_30)
    gate.configure(lease_s=1.0)
    permit = gate.acquire(max_wait=0)
    assert permit.leased
    assert permit.lease_s == pytest.approx(1.0)

    clock.advance(0.5)
    assert permit.renew() is True
    clock.advance(0.9)  # 1.4 s: past the first expiry, within the renewed one
    held = gate.try_acquire()
    clock.advance(0.2)  # 1.6 s: past the renewed expiry
    after = gate.try_acquire()

    assert (held.allowed, held.reason) == (False, "concurrency")
    assert after.allowed
    assert after.permit is not None
    assert after.permit.lease_s == pytest.approx(1.0)
    assert after.permit.release() is True
    assert permit.release() is False  # it had expired: the slot was reclaimed


def test_a_longer_live_lease_is_renewed_by_its_own_length(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Live 30 s, default 1 s: a renewal at 20 s extends to 50 s; one by the default
    would have cut the lease to 21 s."""
    gate = make(Gate, "tos", policy=DEFAULT_1)
    gate.configure(lease_s=30.0)
    permit = gate.acquire(max_wait=0)
    assert permit.lease_s == pytest.approx(30.0)

    clock.advance(20.0)
    assert permit.renew() is True
    clock.advance(5.0)  # 25 s
    held = gate.try_acquire()
    clock.advance(26.0)  # 51 s: past the renewed expiry
    after = gate.try_acquire()

    assert (held.allowed, held.reason) == (False, "concurrency")
    assert after.allowed
    assert after.permit is not None
    assert after.permit.release() is True


def test_the_permit_of_a_try_and_of_a_waited_acquire_know_the_live_lease(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """``try_acquire``'s permit and one admitted after waiting for a lease carry the
    live length too; without a live value it is the default."""
    gate = make(Gate, "tos", policy=DEFAULT_30)
    default = gate.try_acquire().permit
    assert default is not None
    assert default.lease_s == pytest.approx(30.0)
    assert default.release() is True

    gate.configure(lease_s=2.0)
    tried = gate.try_acquire().permit
    assert tried is not None
    waited = gate.acquire(max_wait=5)  # the slot frees when the tried lease expires

    assert tried.lease_s == pytest.approx(2.0)
    assert waited.lease_s == pytest.approx(2.0)
    assert waited.waited_s == pytest.approx(2.0, abs=0.05)
    assert waited.release() is True


def test_a_limit_without_live_config_keeps_its_own_lease(make: Callable[..., Any]) -> None:
    """A concurrency limiter reads no live values: its permits' lease is its own."""
    sem = make(ConcurrencyLimiter, "tos", limit=1, lease_s=7)
    permit = sem.acquire(max_wait=0)

    assert permit.lease_s == pytest.approx(7.0)
    assert permit.release() is True


# --- asyncio, manual clock --------------------------------------------------------------


def test_async_a_shorter_live_lease_is_renewed_by_its_own_length(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """As the sync twin: live 1 s, default 30 s."""

    async def scenario() -> tuple[float, float | None, bool, Any, Any]:
        gate = AsyncGate(async_backend_factory(), "tos", policy=DEFAULT_30, prefix=prefix)
        await gate.configure(lease_s=1.0)
        permit = await gate.acquire(max_wait=0)
        tried = (await gate.try_acquire()).permit
        clock.advance(0.5)
        renewed = await permit.renew()
        clock.advance(0.9)
        held = await gate.try_acquire()
        clock.advance(0.2)
        after = await gate.try_acquire()
        if after.permit is not None:
            await after.permit.release()
        return permit.lease_s, tried.lease_s if tried else None, renewed, held, after

    lease_s, tried_lease_s, renewed, held, after = run(scenario())

    assert lease_s == pytest.approx(1.0)
    assert tried_lease_s is None  # the one slot was held
    assert renewed is True
    assert (held.allowed, held.reason) == (False, "concurrency")
    assert after.allowed


def test_async_a_longer_live_lease_is_renewed_by_its_own_length(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """As the sync twin: live 30 s, default 1 s."""

    async def scenario() -> tuple[float, bool, Any, Any]:
        gate = AsyncGate(async_backend_factory(), "tos", policy=DEFAULT_1, prefix=prefix)
        await gate.configure(lease_s=30.0)
        permit = await gate.acquire(max_wait=0)
        clock.advance(20.0)
        renewed = await permit.renew()
        clock.advance(5.0)
        held = await gate.try_acquire()
        clock.advance(26.0)
        after = await gate.try_acquire()
        if after.permit is not None:
            await after.permit.release()
        return permit.lease_s, renewed, held, after

    lease_s, renewed, held, after = run(scenario())

    assert lease_s == pytest.approx(30.0)
    assert renewed is True
    assert (held.allowed, held.reason) == (False, "concurrency")
    assert after.allowed


# --- the real renewers, real time -------------------------------------------------------

#: The live lease of the real-time tests (default 30 s): renewed every 0.1 s.
SHORT_LEASE_S = 0.3
#: How long the slot is held: four live leases.
HOLD_S = 1.2


def _held_throughout(gate: Gate) -> list[tuple[int, str]]:
    """Poll the gate for :data:`HOLD_S` while the caller holds its one slot: the lease
    count and what a competing ``try_acquire`` gets (refused: nothing consumed)."""
    seen: list[tuple[int, str]] = []
    deadline = time.monotonic() + HOLD_S

    def observe() -> bool:
        competing = gate.try_acquire()
        if competing.permit is not None:
            competing.permit.release()
        seen.append((gate.state().leases_held, competing.reason))
        return time.monotonic() >= deadline

    wait_for(observe, HOLD_S + 5.0, "the hold to end", every_s=0.02)
    return seen


@pytest.mark.redis
def test_the_renewer_thread_keeps_a_short_live_lease(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Real Redis, real clock: live 0.3 s, default 30 s. ``slot()`` holds the one lease
    for 1.2 s (four live leases): it is held throughout and a competitor is refused
    for ``concurrency`` to the end."""
    gate = Gate(RedisBackend(redis_client), "tos", policy=DEFAULT_30, prefix=prefix)
    gate.configure(lease_s=SHORT_LEASE_S)

    with gate.slot(max_wait=0) as permit:
        seen = _held_throughout(gate)
        last = gate.try_acquire()
        if last.permit is not None:
            last.permit.release()
        assert permit.lease_s == pytest.approx(SHORT_LEASE_S)

    assert len(seen) > 10
    assert seen == [(1, "concurrency")] * len(seen)
    assert (last.allowed, last.reason) == (False, "concurrency")
    assert gate.state().leases_held == 0  # released at the end of the block


@pytest.mark.parametrize(
    "backend_kind",
    [pytest.param("memory", id="memory"), pytest.param("redis", marks=pytest.mark.redis)],
)
def test_async_the_renewer_task_keeps_a_short_live_lease(
    backend_kind: str, request: pytest.FixtureRequest, prefix: str
) -> None:
    """As the sync twin, with ``AsyncGate.slot()``'s renewer task, on both backends."""

    async def scenario() -> tuple[float, list[tuple[int, str]], str, int]:
        if backend_kind == "memory":
            backend: Any = AsyncMemoryBackend(MemoryBackend())
        else:
            request.getfixturevalue("redis_client")  # deletes this test's keys afterwards
            url = request.getfixturevalue("redis_url")
            backend = AsyncRedisBackend(redis.asyncio.Redis.from_url(url))
        gate = AsyncGate(backend, "tos", policy=DEFAULT_30, prefix=prefix)
        await gate.configure(lease_s=SHORT_LEASE_S)
        seen: list[tuple[int, str]] = []
        async with gate.slot(max_wait=0) as permit:
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                competing = await gate.try_acquire()
                if competing.permit is not None:
                    await competing.permit.release()
                seen.append(((await gate.state()).leases_held, competing.reason))
                await asyncio.sleep(0.02)
            last = await gate.try_acquire()
            if last.permit is not None:
                await last.permit.release()
        return permit.lease_s, seen, last.reason, (await gate.state()).leases_held

    lease_s, seen, last_reason, held_after = run(scenario())

    assert lease_s == pytest.approx(SHORT_LEASE_S)
    assert len(seen) > 10
    assert seen == [(1, "concurrency")] * len(seen)
    assert last_reason == "concurrency"
    assert held_after == 0
