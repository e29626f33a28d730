"""The backend table: every behaviour test runs on memory and on a real Redis.

Both get a :class:`ManualClock`: the Redis backend passes its time to the Lua scripts
as ``now_ms``, and "sleeping" advances the clock. So the same deterministic test
exercises the real scripts in a real server, without a single real sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio

from tidegate.flow.backends import AsyncMemoryBackend, ManualClock, MemoryBackend
from tidegate.flow.backends.redis import AsyncRedisBackend, RedisBackend

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", marks=pytest.mark.redis, id="redis"),
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_700_000_000_000.0)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, clock: ManualClock) -> Any:
    """A sync backend on the shared manual clock."""
    if request.param == "memory":
        return MemoryBackend(clock)
    return RedisBackend(request.getfixturevalue("redis_client"), clock=clock)


@pytest.fixture
def make(backend: Any, prefix: str) -> Callable[..., Any]:
    """Build a control on this test's backend and key prefix: ``make(Gate, "customs", ...)``."""

    def build(cls: type, name: str, **kwargs: Any) -> Any:
        return cls(backend, name, prefix=prefix, **kwargs)

    return build


@pytest.fixture(params=BACKENDS)
def async_backend_factory(request: pytest.FixtureRequest, clock: ManualClock) -> Callable[[], Any]:
    """An asyncio backend on the shared manual clock, as a factory: an asyncio Redis
    client belongs to the event loop that uses it, so each test builds it in its own."""
    if request.param == "memory":
        inner = MemoryBackend(clock)
        return lambda: AsyncMemoryBackend(inner)
    request.getfixturevalue("redis_client")  # deletes this test's keys afterwards
    url = request.getfixturevalue("redis_url")
    return lambda: AsyncRedisBackend(redis.asyncio.Redis.from_url(url), clock=clock)
