"""A pause written while a caller sleeps until its reserved slot holds that caller too.

``acquire`` reserves a GCRA slot and sleeps until it. If another worker's 429 pauses the
fleet during that sleep, the caller must not go out at the end of the sleep: the pause
is checked again after the wait. These tests run on both backends with a manual clock;
the "other worker" pauses the gate from inside the sleeping caller's ``sleep``, at a
known fleet time, so nothing depends on scheduling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from tidegate.errors import Throttled
from tidegate.flow import AsyncGate, Gate
from tidegate.flow.backends import ManualClock
from tidegate.flow.backends.base import Backend
from tidegate.settings import GatePolicy

#: One admission a second, no burst: the second caller's slot is one second away.
ONE_PER_SECOND = GatePolicy(rate=1.0, burst=1, concurrency=4, lease_s=30)


class _PausedWhileSleeping:
    """A backend through which, when the caller first sleeps for its slot, another
    worker pauses the gate (as on a 429) before the sleep's time passes."""

    def __init__(self, inner: Any, on_first_sleep: Callable[[], None]) -> None:
        self.inner = inner
        self._pending: Callable[[], None] | None = on_first_sleep
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending()
        self.inner.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _worker(backend: Any, prefix: str) -> Gate:
    return Gate(backend, "customs", policy=ONE_PER_SECOND, prefix=prefix)


def test_a_pause_during_the_slot_wait_holds_the_caller_until_it_ends(
    backend: Any, prefix: str, clock: ManualClock
) -> None:
    """The second caller's slot is 1 s away; 0 s into that wait a 429 pauses the fleet for
    3 s. The caller is admitted when the pause ends, not when its slot comes."""
    other = _worker(backend, prefix)
    other.acquire(max_wait=0).release()  # the bucket's only token: the next slot is +1 s
    pause_until_ms: list[float] = []

    def other_worker_gets_a_429() -> None:
        other.pause(3.0, "http_429")
        pause_until_ms.append(clock.now_ms() + 3000.0)

    sleeping = _PausedWhileSleeping(backend, other_worker_gets_a_429)
    assert isinstance(sleeping, Backend)
    start_ms = clock.now_ms()

    permit = _worker(sleeping, prefix).acquire(max_wait=10)

    assert sleeping.slept[0] == pytest.approx(1.0, abs=1e-3)  # it did sleep for its slot
    assert clock.now_ms() >= pause_until_ms[0]
    assert permit.waited_s == pytest.approx((pause_until_ms[0] - start_ms) / 1000, abs=1e-3)
    assert permit.leased
    assert other.state().leases_held == 1  # the lease taken with the first slot went back
    permit.release()


def test_a_pause_beyond_the_budget_after_the_slot_wait_parks_the_caller(
    backend: Any, prefix: str, clock: ManualClock
) -> None:
    """The pause outlasts what is left of ``max_wait``: Throttled("paused"), as for any
    pause, and the lease reserved with the slot is given back."""
    other = _worker(backend, prefix)
    other.acquire(max_wait=0).release()
    sleeping = _PausedWhileSleeping(backend, lambda: other.pause(60.0, "http_429"))

    with pytest.raises(Throttled) as info:
        _worker(sleeping, prefix).acquire(max_wait=10)

    assert info.value.reason == "paused"
    assert info.value.wait_s == pytest.approx(59.0, abs=1e-2)
    assert other.state().leases_held == 0


def test_no_pause_during_the_slot_wait_admits_at_the_slot(
    backend: Any, prefix: str, clock: ManualClock
) -> None:
    """The re-check costs nothing when no pause came: admitted exactly at the slot."""
    other = _worker(backend, prefix)
    other.acquire(max_wait=0).release()
    sleeping = _PausedWhileSleeping(backend, lambda: None)
    start_ms = clock.now_ms()

    permit = _worker(sleeping, prefix).acquire(max_wait=10)

    assert (clock.now_ms() - start_ms) / 1000 == pytest.approx(1.0, abs=1e-3)
    assert permit.waited_s == pytest.approx(1.0, abs=1e-3)
    assert sleeping.slept == pytest.approx([1.0], abs=1e-3)
    permit.release()


class _AsyncPausedWhileSleeping:
    """The asyncio twin of :class:`_PausedWhileSleeping`."""

    def __init__(self, inner: Any, on_first_sleep: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self.inner = inner
        self._pending: Callable[[], Coroutine[Any, Any, Any]] | None = on_first_sleep

    async def sleep(self, seconds: float) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            await pending()
        await self.inner.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_async_gate_honours_a_pause_during_the_slot_wait(
    async_backend_factory: Callable[[], Any], prefix: str, clock: ManualClock
) -> None:
    """The asyncio twin runs the same decision: held until the pause ends."""

    async def scenario() -> tuple[float, float, float]:
        backend = async_backend_factory()
        other = AsyncGate(backend, "customs", policy=ONE_PER_SECOND, prefix=prefix)
        await (await other.acquire(max_wait=0)).release()
        until: list[float] = []

        async def other_worker_gets_a_429() -> None:
            await other.pause(3.0, "http_429")
            until.append(clock.now_ms() + 3000.0)

        sleeping = _AsyncPausedWhileSleeping(backend, other_worker_gets_a_429)
        caller = AsyncGate(sleeping, "customs", policy=ONE_PER_SECOND, prefix=prefix)
        permit = await caller.acquire(max_wait=10)
        await permit.release()
        return clock.now_ms(), until[0], permit.waited_s

    admitted_ms, pause_until_ms, waited_s = asyncio.run(scenario())

    assert admitted_ms >= pause_until_ms
    assert waited_s >= 3.0 - 1e-3
