"""Depth probes against real brokers: priority sub-queues, unacked messages, RabbitMQ."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import structlog
from celery import Celery
from kombu import Connection, Consumer, Exchange, Producer, Queue

from tidegate.errors import ConfigurationError
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.integrations.celery.depth import (
    AmqpDepthProbe,
    RedisDepthProbe,
    management_url_for,
    probe_for_app,
    probe_from_url,
)

HERE = Path(__file__).parent


@pytest.mark.redis
def test_priority_sub_queues_are_counted(
    producer: Celery, redis_client: redis.Redis, queues: dict[str, str]
) -> None:
    """Celery messages with priorities land in kombu's sub-lists; LLEN alone misses them."""
    queue = queues["bulk"]
    for priority in (None, 0, 1, 3, 5, 6, 8, 9):
        producer.send_task("t", args=[{}], queue=queue, priority=priority)

    depth = probe_for_app(producer).sample([queue])[queue]

    assert redis_client.llen(queue) == 3  # what KEDA's lists scaler / celery-exporter see
    assert redis_client.llen(f"{queue}\x06\x169") == 1  # kombu's separator and steps
    assert depth.ready == 8
    assert dict(depth.by_priority) == {0: 3, 3: 2, 6: 2, 9: 1}
    assert depth.unacked == 0


@pytest.mark.redis
def test_messages_held_by_a_real_consumer_are_counted_as_unacked(
    producer: Celery, redis_url: str, queues: dict[str, str]
) -> None:
    """A kombu consumer holding 2 unacked messages: ready drops by 2, unacked is 2, the
    total stays; the other queue's held message is not counted for this one."""
    bulk, customs = queues["bulk"], queues["customs"]
    for _ in range(5):
        producer.send_task("t", args=[{}], queue=bulk)
    producer.send_task("t", args=[{}], queue=customs)
    probe = RedisDepthProbe.from_url(redis_url)
    held = []
    with Connection(redis_url) as conn:
        consumer = Consumer(
            conn.channel(),
            [Queue(bulk, routing_key=bulk), Queue(customs, routing_key=customs)],
            callbacks=[lambda body, message: held.append(message)],
            prefetch_count=3,
        )
        with consumer:
            while len(held) < 3:
                conn.drain_events(timeout=5)
            sample = probe.sample([bulk, customs])
            bulk_held = sum(1 for m in held if m.delivery_info["routing_key"] == bulk)
            assert sample[bulk].unacked == bulk_held
            assert sample[customs].unacked == 3 - bulk_held
            assert sample[bulk].total == 5
            assert sample[customs].total == 1
            held[0].ack()
            after = probe.sample([bulk, customs])
            assert after[bulk].total + after[customs].total == 5
            for message in held[1:]:
                message.ack()


@pytest.mark.redis
def test_unacked_messages_of_a_named_exchange_are_routed_by_its_bindings(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """A message published to a direct exchange with its own routing key is attributed to
    the queue that binding leads to (kombu's _kombu.binding.<exchange> set)."""
    exchange = Exchange(f"{prefix}-ex", type="direct")
    target = Queue(f"{prefix}:routed", exchange, routing_key="customs.filing")
    other = Queue(f"{prefix}:other", exchange, routing_key="tos.push")
    held = []
    with Connection(redis_url) as conn:
        channel = conn.channel()
        for q in (target, other):
            q(channel).declare()
        publish = Producer(channel, exchange=exchange)
        publish.publish({"n": 1}, routing_key="customs.filing")
        publish.publish({"n": 2}, routing_key="customs.filing")
        with Consumer(conn.channel(), [target], callbacks=[lambda b, m: held.append(m)]):
            conn.drain_events(timeout=5)
            sample = RedisDepthProbe(redis_client).sample([target.name, other.name])
            assert (sample[target.name].ready, sample[target.name].unacked) == (1, 1)
            assert sample[other.name].total == 0
            held[0].ack()
    redis_client.delete(f"_kombu.binding.{exchange.name}")


@pytest.mark.redis
@pytest.mark.celery
@pytest.mark.slow
def test_a_real_worker_holding_a_task_shows_as_unacked(
    redis_url: str,
    redis_client: redis.Redis,
    queues: dict[str, str],
    prefix: str,
    poll: Callable[..., None],
) -> None:
    """A prefork Celery worker (acks_late, prefetch 1) running a task: 1 unacked, the rest
    ready; when it is released the queue drains to 0."""
    queue, release = queues["customs"], f"{prefix}:release"
    pythonpath = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    fleet = Fleet(
        "inbound_hold_app",
        [Pool("hold", [queue], concurrency=1)],
        env={"TIDEGATE_REDIS_URL": redis_url, "PYTHONPATH": pythonpath},
    )
    app = Celery(broker=redis_url)
    probe = RedisDepthProbe(redis_client)
    try:
        fleet.start()
        for _ in range(3):
            app.send_task("tidegate.test.hold", args=[release], queue=queue)
        poll(lambda: probe.sample([queue])[queue].unacked == 1, 30, "a task reserved")
        depth = probe.sample([queue])[queue]
        assert (depth.ready, depth.unacked, depth.total) == (2, 1, 3)
        redis_client.set(release, "1")
        poll(lambda: probe.sample([queue])[queue].total == 0, 30, "the queue drained")
    finally:
        fleet.stop()
        app.close()


@pytest.mark.redis
def test_kombu_transport_options_are_honoured(
    redis_url: str, redis_client: redis.Redis, prefix: str
) -> None:
    """global_keyprefix and custom priority_steps from the app's transport options."""
    app = Celery(broker=redis_url)
    app.conf.broker_transport_options = {
        "global_keyprefix": f"{prefix}:kp:",
        "priority_steps": list(range(10)),
    }
    queue = f"{prefix}:opt"
    for priority in (0, 1, 2, 7):
        app.send_task("t", args=[], queue=queue, priority=priority)
    depth = probe_for_app(app).sample([queue])[queue]
    app.close()
    assert redis_client.llen(f"{prefix}:kp:{queue}\x06\x167") == 1
    assert depth.ready == 4
    assert dict(depth.by_priority)[7] == 1


def test_the_probe_is_chosen_from_the_broker_url() -> None:
    """redis:// → Redis probe, amqp:// → AMQP probe, anything else is refused."""
    assert isinstance(probe_from_url("redis://127.0.0.1:1/0"), RedisDepthProbe)
    assert isinstance(probe_from_url("amqp://guest:guest@127.0.0.1:1//"), AmqpDepthProbe)
    with pytest.raises(ConfigurationError, match="no queue depth probe"):
        probe_from_url("sqs://key:secret@")


def test_rabbitmq_probe_counts_ready_unacked_and_consumers(
    rabbitmq_url: str, rabbitmq_management_url: str, prefix: str
) -> None:
    """Passive declare: ready messages and consumers; a queue that does not exist is 0.
    A delivered, unacknowledged message is counted too, from the management API (whose
    figures lag by up to its statistics interval, so the test polls for it)."""
    queue = Queue(f"{prefix}.amqp", routing_key=f"{prefix}.amqp")
    missing = f"{prefix}.missing"
    held: list[Any] = []
    # Publisher confirms: each publish returns once the broker has queued the message.
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        queue(channel).declare()
        publish = Producer(channel)
        for n in range(4):
            publish.publish({"n": n}, routing_key=queue.name)
        probe = probe_from_url(
            rabbitmq_url, transport_options={"management_url": rabbitmq_management_url}
        )
        before = probe.sample([queue.name, missing])
        consumer = Consumer(
            conn.channel(), [queue], prefetch_count=1, callbacks=[lambda b, m: held.append(m)]
        )
        with consumer:
            conn.drain_events(timeout=5)
            during = _poll_depth(probe, queue.name, lambda d: d.unacked > 0)
        queue(channel).delete()
        probe.close()
    assert (before[queue.name].ready, before[queue.name].unacked) == (4, 0)
    assert before[queue.name].consumers == 0
    assert before[missing].total == 0
    assert (during.ready, during.unacked, during.consumers, len(held)) == (3, 1, 1, 1)
    assert during.total == 4


def _poll_depth(
    probe: Any, queue: str, done: Callable[[Any], bool], timeout_s: float = 20.0
) -> Any:
    """Sample until ``done(depth)`` (the management API refreshes every few seconds)."""
    deadline = time.monotonic() + timeout_s
    while True:
        depth = probe.sample([queue])[queue]
        if done(depth) or time.monotonic() > deadline:
            return depth
        time.sleep(0.2)


def test_rabbitmq_probe_without_the_management_api_says_so_once(
    rabbitmq_url: str, prefix: str
) -> None:
    """No management plugin: ready and consumers still come from AMQP, unacked is 0,
    and one warning names the API (without its password) instead of pretending."""
    queue = Queue(f"{prefix}.nomgmt", routing_key=f"{prefix}.nomgmt")
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        queue(channel).declare()
        Producer(channel).publish({"n": 1}, routing_key=queue.name)
        probe = AmqpDepthProbe(conn, management_url="http://guest:secret@127.0.0.1:1")
        with structlog.testing.capture_logs() as events:
            first = probe.sample([queue.name])[queue.name]
            probe.sample([queue.name])
        queue(channel).delete()
    warnings = [e for e in events if e["event"] == "amqp_unacked_unavailable"]
    assert (first.ready, first.unacked, first.consumers) == (1, 0, 0)
    assert len(warnings) == 1
    assert warnings[0]["management_url"] == "http://guest:***@127.0.0.1:1"
    assert "secret" not in str(events)


@pytest.mark.parametrize(
    ("amqp_url", "management"),
    [
        ("amqp://guest:guest@127.0.0.1:5672//", "http://guest:guest@127.0.0.1:15672"),
        ("amqps://port:p%40ss@mq.example:5671/edi", "https://port:p%40ss@mq.example:15672"),
        ("amqp://mq.example//", "http://guest:guest@mq.example:15672"),
    ],
)
def test_the_management_url_follows_the_broker_url(amqp_url: str, management: str) -> None:
    assert management_url_for(amqp_url) == management
