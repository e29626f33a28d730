"""A worker's consumer survives losing Redis with a BRPOP in flight and a task unacked.

The chaos run ``redis-restart`` flaked: the TOS worker's main process exited
("Unrecoverable error: AttributeError") when Redis died, and its queue was never
consumed again. Celery, on a lost connection, ``collect()``s the connection and then
closes it, ignoring connection and channel errors. With a BRPOP in flight, kombu's
first close of the consuming channel fails before the channel counts as closed; the
pidbox channel's close fails too (its auto-delete queue cannot be deleted), so the
consuming channel is still open when ``collect()`` detaches the transport, and the
second close restored its unacked messages with no transport to build a client from.

Real Redis, killed; the consumer is laid out as a Celery worker's (a task channel with
an unacked message and a BRPOP in flight, a pidbox channel on a fanout queue) and the
connection is torn down in Celery's order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Queue
from kombu.common import ignore_errors

from tidegate.integrations.celery.broker import Transport
from tidegate.redis_server import EmbeddedRedis

pytestmark = pytest.mark.redis


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    """A Redis of this test's own: it is killed and started again on its AOF."""
    own = EmbeddedRedis(appendonly=True).start()
    try:
        yield own
    finally:
        own.stop()


def test_losing_redis_with_a_brpop_in_flight_and_a_task_unacked_is_recoverable(
    server: EmbeddedRedis,
) -> None:
    conn = Connection(server.url, transport=Transport)
    tasks = conn.SimpleQueue("edi.tos")
    tasks.consumer.qos(prefetch_count=2)
    tasks.put({"unit": 1})
    size = server.aof_size()
    held = tasks.get(timeout=5)  # a task running, unacked
    channel = tasks.consumer.channel
    pidbox = conn.channel()
    queue = Queue("w.pidbox", Exchange("w.pidbox", type="fanout"), auto_delete=True)
    Consumer(pidbox, [queue], callbacks=[lambda body, message: None]).consume()
    channel._brpop_start()  # a free prefetch slot: the consumer waits for the next one
    client = redis.Redis.from_url(server.url)
    assert client.hexists("unacked", held.delivery_tag)
    client.close()
    assert server.aof_grown(size) > size  # the kill must not lose the unacked write

    server.kill()
    # Celery's Consumer.on_connection_error_after_connected, in its order.
    with contextlib.suppress(Exception):  # Celery ignores whatever collect() raises
        conn.collect(socket_timeout=1.0)
    ignore_errors(conn, conn.close)  # raised AttributeError: the worker exited
    # The task ends after Celery reconnected; its ack goes to the closed channel (it
    # raised AttributeError in the event loop: the worker exited).
    held.ack()

    assert channel.closed
    server.start()
    client = redis.Redis.from_url(server.url)
    try:
        # Not acked in Redis: the visibility timeout hands it out again.
        assert client.hexists("unacked", held.delivery_tag)
    finally:
        client.close()
