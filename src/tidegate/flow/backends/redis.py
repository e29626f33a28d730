"""The fleet-wide backend: every decision is one EVALSHA of a ``.lua`` script.

Scripts are registered once per client (``register_script`` runs EVALSHA and reloads
the script on NOSCRIPT, e.g. after a Redis restart). The clock is Redis ``TIME`` unless
a test injects ``now_ms``: hosts never compare their own clocks. The sync and asyncio
backends share the argument encoding and result decoding below and differ only in
awaiting the client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

from tidegate._redis import lua_script, map_redis_errors
from tidegate.flow.backends.base import (
    AcquireParams,
    AcquireResult,
    GateKeys,
    GateSnapshot,
    Status,
)
from tidegate.flow.backends.memory import ManualClock

__all__ = ["AsyncRedisBackend", "RedisBackend"]

#: Wake-up tokens only matter to waiters blocked right now; stale ones expire.
_WAKE_TTL_MS = 60_000


def _now_arg(clock: ManualClock | None) -> str:
    """``""`` lets the script read Redis TIME; a test clock passes its own time."""
    return "" if clock is None else repr(clock.now_ms())


def _argv(params: AcquireParams, clock: ManualClock | None) -> list[str | int | float]:
    flags = ("p" if params.check_pause else "") + ("c" if params.read_config else "")
    now = params.now_ms if params.now_ms is not None or clock is None else clock.now_ms()
    return [
        "" if now is None else repr(now),
        params.cost,
        repr(params.rate),
        params.burst,
        params.concurrency,
        repr(params.lease_ms),
        repr(params.max_wait_ms),
        params.holder,
        flags,
    ]


def _decode(raw: Sequence[bytes]) -> AcquireResult:
    return AcquireResult(
        Status(int(raw[0])), float(raw[1]), int(raw[2]), float(raw[3]), int(raw[4]), raw[5] == b"1"
    )


def _snapshot(results: list[Any], clock: ManualClock | None) -> GateSnapshot:
    """Build a snapshot from the pipeline [HGETALL config, HGETALL pause, ZCARD, GET, TIME]."""
    config, pause, held, tat, now = results
    seconds, micros = now
    now_ms = clock.now_ms() if clock is not None else int(seconds) * 1000 + int(micros) / 1000
    until = pause.get(b"until_ms")
    reason = pause.get(b"reason")
    return GateSnapshot(
        config={k.decode(): float(v) for k, v in config.items()},
        paused_until_ms=float(until) if until is not None else None,
        pause_reason=reason.decode() if reason is not None else None,
        leases_held=held,
        tat_ms=float(tat) if tat is not None else None,
        now_ms=now_ms,
    )


class RedisBackend:
    """Fleet-wide state in Redis.

    Args:
        client: a ``redis.Redis``; build one with ``tidegate._redis.client_from_url``
            to get tidegate's timeouts.
    """

    def __init__(self, client: redis.Redis, *, clock: ManualClock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._acquire = client.register_script(lua_script("gate_acquire"))
        self._release = client.register_script(lua_script("lease_release"))
        self._renew = client.register_script(lua_script("lease_renew"))
        self._pause = client.register_script(lua_script("gate_pause"))

    def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        with map_redis_errors("gate acquire"):
            raw = self._acquire(keys.as_list(), _argv(params, self.clock))
        return _decode(raw)

    def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        with map_redis_errors("lease release"):
            removed = self._release(
                [keys.leases, keys.released], [holder, max(1, wake_cap), _WAKE_TTL_MS]
            )
        return bool(removed)

    def renew(self, keys: GateKeys, holder: str, lease_ms: float) -> bool:
        with map_redis_errors("lease renew"):
            return bool(self._renew([keys.leases], [holder, repr(lease_ms), _now_arg(self.clock)]))

    def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self.clock is not None:
            self.clock.advance(timeout_s)
            return
        # BLPOP takes a float timeout (Redis >= 6); 0 would block forever.
        with map_redis_errors("lease wait"):
            self.client.blpop([keys.released], timeout=max(0.001, timeout_s))

    def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        with map_redis_errors("gate pause"):
            until, extended = self._pause(
                [keys.pause], [_now_arg(self.clock), repr(pause_ms), reason]
            )
        return float(until), extended == b"1"

    def resume(self, keys: GateKeys) -> None:
        with map_redis_errors("gate resume"):
            self.client.delete(keys.pause)

    def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        with map_redis_errors("gate configure"):
            self.client.hset(keys.config, mapping={k: repr(v) for k, v in values.items()})

    def snapshot(self, keys: GateKeys) -> GateSnapshot:
        with map_redis_errors("gate snapshot"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.config)
            pipe.hgetall(keys.pause)
            pipe.zcard(keys.leases)
            pipe.get(keys.tat)
            pipe.time()
            results = pipe.execute()
        return _snapshot(results, self.clock)

    def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def monotonic(self) -> float:
        return self.clock.monotonic() if self.clock is not None else time.monotonic()


class AsyncRedisBackend:
    """The asyncio twin of :class:`RedisBackend` over ``redis.asyncio.Redis``."""

    def __init__(self, client: redis.asyncio.Redis, *, clock: ManualClock | None = None) -> None:
        self.client = client
        self.clock = clock
        self._acquire = client.register_script(lua_script("gate_acquire"))
        self._release = client.register_script(lua_script("lease_release"))
        self._renew = client.register_script(lua_script("lease_renew"))
        self._pause = client.register_script(lua_script("gate_pause"))

    async def acquire(self, keys: GateKeys, params: AcquireParams) -> AcquireResult:
        with map_redis_errors("gate acquire"):
            raw = await self._acquire(keys.as_list(), _argv(params, self.clock))
        return _decode(raw)

    async def release(self, keys: GateKeys, holder: str, *, wake_cap: int) -> bool:
        with map_redis_errors("lease release"):
            removed = await self._release(
                [keys.leases, keys.released], [holder, max(1, wake_cap), _WAKE_TTL_MS]
            )
        return bool(removed)

    async def renew(self, keys: GateKeys, holder: str, lease_ms: float) -> bool:
        with map_redis_errors("lease renew"):
            return bool(
                await self._renew([keys.leases], [holder, repr(lease_ms), _now_arg(self.clock)])
            )

    async def wait_released(self, keys: GateKeys, timeout_s: float) -> None:
        if self.clock is not None:
            self.clock.advance(timeout_s)
            return
        with map_redis_errors("lease wait"):
            await self.client.blpop([keys.released], timeout=max(0.001, timeout_s))

    async def pause(self, keys: GateKeys, pause_ms: float, reason: str) -> tuple[float, bool]:
        with map_redis_errors("gate pause"):
            until, extended = await self._pause(
                [keys.pause], [_now_arg(self.clock), repr(pause_ms), reason]
            )
        return float(until), extended == b"1"

    async def resume(self, keys: GateKeys) -> None:
        with map_redis_errors("gate resume"):
            await self.client.delete(keys.pause)

    async def write_config(self, keys: GateKeys, values: dict[str, float]) -> None:
        with map_redis_errors("gate configure"):
            await self.client.hset(keys.config, mapping={k: repr(v) for k, v in values.items()})

    async def snapshot(self, keys: GateKeys) -> GateSnapshot:
        with map_redis_errors("gate snapshot"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.config)
            pipe.hgetall(keys.pause)
            pipe.zcard(keys.leases)
            pipe.get(keys.tat)
            pipe.time()
            results = await pipe.execute()
        return _snapshot(results, self.clock)

    async def sleep(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    def monotonic(self) -> float:
        return self.clock.monotonic() if self.clock is not None else time.monotonic()
