"""The asyncio twins make the same decisions as the sync controls (same script, same maths)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tidegate.errors import Throttled
from tidegate.flow import AsyncConcurrencyLimiter, AsyncGate, AsyncRateLimiter
from tidegate.flow.backends import ManualClock
from tidegate.settings import GatePolicy


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def test_async_rate_limiter_matches_sync_behaviour(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """Burst, refusal with exact wait, reservation with exact sleep."""

    async def scenario() -> tuple[list[bool], float, list[float]]:
        limiter = AsyncRateLimiter(
            async_backend_factory(), "customs", rate=10.0, burst=2, prefix=prefix
        )
        tries = [(await limiter.try_acquire()).allowed for _ in range(3)]
        refused = await limiter.try_acquire()
        clock.advance(refused.wait_s)
        waits = [await limiter.acquire(max_wait=1) for _ in range(3)]
        return tries, refused.wait_s, waits

    tries, wait_s, waits = run(scenario())

    assert tries == [True, True, False]
    assert wait_s == pytest.approx(0.1, abs=1e-3)
    assert waits == pytest.approx([0.0, 0.1, 0.1], abs=1e-3)


def test_async_gate_pause_and_concurrency(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """Pause makes acquire wait it out; the cap refuses a second holder until release."""

    async def scenario() -> tuple[float, str, bool]:
        gate = AsyncGate(
            async_backend_factory(),
            "tos",
            policy=GatePolicy(rate=50.0, burst=5, concurrency=1, lease_s=10),
            prefix=prefix,
        )
        await gate.pause(2.0, "http_429")
        async with gate.slot(max_wait=5, auto_renew=False) as permit:
            refused = await gate.try_acquire()
        after = await gate.try_acquire()
        assert after.permit is not None
        await after.permit.release()  # type: ignore[misc]
        return permit.waited_s, refused.reason, after.allowed

    waited, reason, allowed_after = run(scenario())

    assert waited == pytest.approx(2.0, abs=1e-3)
    assert reason == "concurrency"
    assert allowed_after


def test_async_concurrency_limiter_times_out_with_throttled(
    async_backend_factory: Callable[[], Any], prefix: str
) -> None:
    """A waiter whose budget runs out gets Throttled(reason="concurrency")."""

    async def scenario() -> None:
        sem = AsyncConcurrencyLimiter(
            async_backend_factory(), "db", limit=1, lease_s=60, prefix=prefix
        )
        await sem.acquire(max_wait=0)
        await sem.acquire(max_wait=2)

    with pytest.raises(Throttled) as info:
        run(scenario())
    assert info.value.reason == "concurrency"
