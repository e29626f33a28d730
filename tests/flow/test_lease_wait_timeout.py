"""A lease wait longer than the Redis client's socket timeout is not "Redis down".

A unit waiting for a concurrency slot blocks in ``BLPOP`` on the released list. When
that block lasted as long as the client's socket timeout, redis-py's read timed out,
the gate reported the backend unavailable and the unit was requeued for nothing (5–18
times per RQ demo run: a 10-s lease wait against tidegate's 5-s socket timeout).
"""

from __future__ import annotations

import asyncio

import pytest

from tidegate._redis import async_client_from_url, client_from_url
from tidegate.flow.backends.redis import AsyncRedisBackend, RedisBackend
from tidegate.keys import Keyspace

pytestmark = pytest.mark.redis

SOCKET_TIMEOUT_S = 0.4
WAIT_S = 1.0  # longer than the socket timeout; nobody releases a lease


def test_a_wait_longer_than_the_socket_timeout_returns_instead_of_failing(
    redis_url: str, prefix: str
) -> None:
    client = client_from_url(redis_url, socket_timeout=SOCKET_TIMEOUT_S)
    try:
        backend = RedisBackend(client)
        backend.wait_released(Keyspace(prefix).limit("tos"), WAIT_S)
        assert client.ping()  # the connection is still good afterwards
    finally:
        client.close()


def test_the_asyncio_twin_returns_too(redis_url: str, prefix: str) -> None:
    async def wait() -> bool:
        client = async_client_from_url(redis_url, socket_timeout=SOCKET_TIMEOUT_S)
        try:
            await AsyncRedisBackend(client).wait_released(Keyspace(prefix).limit("tos"), WAIT_S)
            return bool(await client.ping())
        finally:
            await client.aclose()

    assert asyncio.run(wait())
