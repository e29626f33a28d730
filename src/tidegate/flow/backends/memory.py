"""The single-process backend: the same contract as Redis, in a dict under a lock.

Useful on its own for one process (a script, a single worker), and as the test fake
with a controllable clock: :class:`ManualClock` makes ``sleep`` advance time instead of
waiting, so behaviour tests run in microseconds and never sleep to "make it pass".
The rate maths is :func:`tidegate.flow.gcra.gcra_reserve`, the reference the Lua
script is tested against.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tidegate.errors import BackendError
from tidegate.flow.backends.base import (
    RENEW_LOST,
    RENEW_OK,
    RENEW_RESTORED,
    AcquireParams,
    AcquireResult,
    GateKeys,
    GateSnapshot,
    Status,
)
from tidegate.flow.gcra import gcra_reserve

__all__ = ["AsyncMemoryBackend", "ManualClock", "MemoryBackend"]


class ManualClock:
    """A clock that only moves when told to (or when someone "sleeps" on it).

    Args:
        start_ms: the initial time in ms (any epoch).
    """

    def __init__(self, start_ms: float = 1_000_000.0) -> None:
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> float:
        with self._lock:
            return self._now_ms

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now_ms += max(0.0, seconds) * 1000.0

    def monotonic(self) -> float:
        return self.now_ms() / 1000.0


@dataclass
class _Limit:
    tat_ms: float | None = None
    leases: dict[str, float] = field(default_factory=dict)
    paused_until_ms: float | None = None
    pause_reason: str | None = None
    config: dict[str, float] = field(default_factory=dict)
    admitted: int = 0


def _wall_ms() -> float:
    return time.time() * 1000.0


class MemoryBackend:
    """Thread-safe in-process state with the Redis backend's semantics.

    Args:
        clock: a :class:`ManualClock` for tests; real time when omitted.
    """

    def __init__(self, clock: ManualClock | None = None) -> None:
        self._clock = clock
        self._now: Callable[[], float] = clock.now_ms if clock is not None else _wall_ms
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._limits: dict[str, _Limit] = {}

    def _limit(self, keys: GateKeys) -> _Limit:
        return self._limits.setdefault(keys.tat, _Limit())

    def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        with self._lock:
            return self._decide(self._limit(keys), params)

    def _decide(self, limit: _Limit, p: AcquireParams) -> AcquireResult:
        """The twin of gate_acquire.lua: pause, then leases, then rate."""
        now = self._now() if p.now_ms is None else p.now_ms
        rate, burst = p.rate, p.burst
        cap, lease_ms = p.concurrency, p.lease_ms
        if p.read_config:
            rate = limit.config.get("rate", rate)
            burst = int(limit.config.get("burst", burst))
            cap = int(limit.config.get("concurrency", cap))
            lease_ms = limit.config.get("lease_ms", lease_ms)
        if not p.leases:
            cap = 0
        if not p.tokens:
            rate = 0
        if p.check_pause and limit.paused_until_ms is not None and limit.paused_until_ms > now:
            return AcquireResult(
                Status.PAUSED, limit.paused_until_ms - now, 0, 0, False, now, lease_ms
            )
        reclaimed, free = 0, -1
        if cap > 0:
            expired = [h for h, exp in limit.leases.items() if exp < now]
            for holder in expired:
                del limit.leases[holder]
            reclaimed = len(expired)
            if len(limit.leases) >= cap:
                earliest = min(limit.leases.values())
                return AcquireResult(
                    Status.CONCURRENCY, earliest - now, 0, reclaimed, False, now, lease_ms
                )
            free = cap - len(limit.leases) - 1
        wait, remaining = 0.0, -1
        if rate > 0:
            if p.cost > burst:
                raise BackendError(f"cost {p.cost} exceeds burst {burst}")
            out = gcra_reserve(
                limit.tat_ms, now, cost=p.cost, rate=rate, burst=burst, max_wait_ms=p.max_wait_ms
            )
            if not out.admitted:
                return AcquireResult(
                    Status.RATE, out.wait_ms, out.remaining, reclaimed, False, now, lease_ms
                )
            limit.tat_ms = out.tat_ms
            wait, remaining = out.wait_ms, out.remaining
        if cap > 0:
            limit.leases[p.holder] = now + wait + lease_ms
            remaining = free if remaining < 0 else min(free, remaining)
        limit.admitted += p.cost
        return AcquireResult(Status.ADMITTED, wait, remaining, reclaimed, cap > 0, now, lease_ms)

    def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        with self._lock:
            removed = self._limit(keys).leases.pop(holder, None) is not None
            self._released.notify()
            return removed

    def renew(self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False) -> int:
        with self._lock:
            leases = self._limit(keys).leases
            now = self._now()
            if holder not in leases and restore:
                leases[holder] = now + lease_ms
                return RENEW_RESTORED
            if holder not in leases or leases[holder] < now:
                return RENEW_LOST
            leases[holder] = now + lease_ms
            return RENEW_OK

    def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self._clock is not None:
            self._clock.advance(timeout_s)
            return
        with self._lock:
            self._released.wait(timeout_s)

    def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        with self._lock:
            limit = self._limit(keys)
            target = self._now() + pause_ms
            if limit.paused_until_ms is not None and limit.paused_until_ms >= target:
                return limit.paused_until_ms, False
            limit.paused_until_ms, limit.pause_reason = target, reason
            return target, True

    def resume(self, keys: GateKeys) -> None:
        with self._lock:
            limit = self._limit(keys)
            limit.paused_until_ms = limit.pause_reason = None

    def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        with self._lock:
            self._limit(keys).config.update(values)

    def snapshot(self, keys: GateKeys) -> GateSnapshot:
        with self._lock:
            limit = self._limit(keys)
            now = self._now()
            paused = limit.paused_until_ms if (limit.paused_until_ms or 0) > now else None
            return GateSnapshot(
                config=dict(limit.config),
                paused_until_ms=paused,
                pause_reason=limit.pause_reason if paused is not None else None,
                leases_held=sum(1 for exp in limit.leases.values() if exp >= now),
                tat_ms=limit.tat_ms,
                now_ms=now,
                admitted_total=limit.admitted,
            )

    def sleep(self, seconds: float) -> None:
        if self._clock is not None:
            self._clock.advance(seconds)
        else:
            time.sleep(seconds)

    def monotonic(self) -> float:
        return self._clock.monotonic() if self._clock is not None else time.monotonic()


class AsyncMemoryBackend:
    """The asyncio face of a :class:`MemoryBackend` (its operations never block long)."""

    def __init__(self, inner: MemoryBackend | None = None) -> None:
        self.inner = inner if inner is not None else MemoryBackend()

    async def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        return self.inner.acquire(keys, params)

    async def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        return self.inner.release(keys, holder, wake_cap=wake_cap)

    async def renew(
        self, keys: GateKeys, holder: str, lease_ms: float, *, restore: bool = False
    ) -> int:
        return self.inner.renew(keys, holder, lease_ms, restore=restore)

    async def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self.inner._clock is not None:
            self.inner._clock.advance(timeout_s)
        else:
            await asyncio.sleep(min(timeout_s, 0.01))

    async def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        return self.inner.pause(keys, pause_ms, reason)

    async def resume(self, keys: GateKeys) -> None:
        self.inner.resume(keys)

    async def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        self.inner.write_config(keys, values)

    async def snapshot(self, keys: GateKeys) -> GateSnapshot:
        return self.inner.snapshot(keys)

    async def sleep(self, seconds: float) -> None:
        if self.inner._clock is not None:
            self.inner._clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    def monotonic(self) -> float:
        return self.inner.monotonic()
