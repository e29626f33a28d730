"""A lease wait is never read as "Redis down", however long or short it is.

A unit waiting for a concurrency slot blocks in ``BLPOP`` on the released list. When
that block lasted as long as the client's socket timeout, redis-py's read timed out,
the gate reported the backend unavailable and the unit was requeued for nothing (5–18
times per RQ demo run: a 10-s lease wait against tidegate's 5-s socket timeout).

At the other end, Redis 6.2 truncates a ``BLPOP`` timeout to whole milliseconds, and 0
blocks forever: a wait of 1 ms or less (the gate's floor was 1 ms, and 0.001 parses a
hair under it) blocked until the socket timeout, with the same result.
"""

from __future__ import annotations

import asyncio

import pytest

from tidegate._redis import async_client_from_url, client_from_url
from tidegate.flow.backends.redis import AsyncRedisBackend, RedisBackend
from tidegate.keys import Keyspace

pytestmark = pytest.mark.redis

SOCKET_TIMEOUT_S = 0.4
#: Longer than the socket timeout, and a millisecond or under; nobody releases a lease.
WAITS_S = [
    pytest.param(1.0, id="1s"),
    pytest.param(0.001, id="1ms"),
    pytest.param(4e-4, id="0.4ms"),
]


@pytest.mark.parametrize("wait_s", WAITS_S)
def test_a_wait_returns_instead_of_failing(redis_url: str, prefix: str, wait_s: float) -> None:
    client = client_from_url(redis_url, socket_timeout=SOCKET_TIMEOUT_S)
    try:
        backend = RedisBackend(client)
        backend.wait_released(Keyspace(prefix).limit("tos"), wait_s)
        assert client.ping()  # the connection is still good afterwards
    finally:
        client.close()


@pytest.mark.parametrize("wait_s", WAITS_S)
def test_the_asyncio_twin_returns_too(redis_url: str, prefix: str, wait_s: float) -> None:
    async def wait() -> bool:
        client = async_client_from_url(redis_url, socket_timeout=SOCKET_TIMEOUT_S)
        try:
            await AsyncRedisBackend(client).wait_released(Keyspace(prefix).limit("tos"), wait_s)
            return bool(await client.ping())
        finally:
            await client.aclose()

    assert asyncio.run(wait())
