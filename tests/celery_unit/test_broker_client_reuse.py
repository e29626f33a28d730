"""The broker channel builds no Redis client per message (issue #18).

kombu's Redis channel built a new ``redis.Redis`` for every command outside its BRPOP
connection — each publish, each unacked record after a delivery, each ack — and a
worker's main process, which records and acks every task, spent a tenth of its CPU on
it. tidegate's channel keeps one client per connection pool. Real Redis, real kombu
messages through tidegate's transport; the channel's client factory is counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection

from tidegate.integrations.celery.broker import Channel, Transport

pytestmark = pytest.mark.redis


@pytest.fixture
def consumer(redis_url: str, prefix: str) -> Iterator[tuple[Any, Channel, list[int]]]:
    """A prefetch-1 consumer on tidegate's transport, and a count of the clients its
    channel builds."""
    with Connection(redis_url, transport=Transport) as conn:
        simple = conn.SimpleQueue(f"{prefix}-q")
        simple.consumer.qos(prefetch_count=1)
        channel = simple.consumer.channel
        assert isinstance(channel, Channel)
        built = [0]
        make = channel._create_client

        def counted(*args: Any, **kwargs: Any) -> Any:
            built[0] += 1
            return make(*args, **kwargs)

        channel._create_client = counted  # type: ignore[method-assign]
        try:
            yield simple, channel, built
        finally:
            simple.clear()
            simple.close()


def _round_trip(simple: Any, n: int) -> list[int]:
    """Publish ``n`` messages, then take and ack each: what a worker's main does."""
    for i in range(n):
        simple.put({"unit": i})
    got = []
    for _ in range(n):
        message = simple.get(timeout=5)
        got.append(message.payload["unit"])
        message.ack()
    return got


def test_no_client_is_built_per_publish_record_or_ack(
    consumer: tuple[Any, Channel, list[int]], redis_client: redis.Redis, prefix: str
) -> None:
    """After the first message, fifty more are published, recorded as unacked and acked
    without a single new client (kombu's channel built three per message: 150)."""
    simple, _, built = consumer
    assert _round_trip(simple, 1) == [0]
    before = built[0]

    assert _round_trip(simple, 50) == list(range(50))

    assert built[0] - before == 0
    # The bookkeeping still happened: nothing left unacked, nothing left queued.
    assert redis_client.hlen("unacked") == 0
    assert redis_client.llen(f"{prefix}-q") == 0


def test_the_client_follows_a_new_connection_pool(
    consumer: tuple[Any, Channel, list[int]],
) -> None:
    """A reconnect gives the channel a new pool (kombu drops ``_pool``); the reused
    client must not keep talking through the old one."""
    simple, channel, _ = consumer
    _round_trip(simple, 1)
    old_pool = channel.pool
    channel._pool = None  # what kombu's _disconnect_pools does
    old_pool.disconnect()

    assert _round_trip(simple, 3) == [0, 1, 2]

    with channel.conn_or_acquire() as client:
        assert client.connection_pool is channel.pool
    assert channel.pool is not old_pool
