"""RabbitMQ never drops a message silently: dead letters reach tidegate's DLQ, and a
publish the broker refuses leaves the unit where it was."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from amqp.exceptions import MessageNacked
from celery import Celery
from kombu import Connection, Queue
from kombu.exceptions import OperationalError

from tidegate.errors import BackendUnavailable
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery import CeleryPreset, ParkingMover, configure
from tidegate.integrations.celery.amqp_drain import (
    BROKER_DEAD_LETTERED,
    DeadLetterDrain,
    letter_from_dead_message,
)
from tidegate.integrations.celery.amqp_topology import AmqpTopology, declare_dead_letters
from tidegate.integrations.celery.depth import AmqpDepthProbe
from tidegate.load import DeadLetter, DeadLetterQueue, ParkingLot

ENVELOPE = {"key": "VERMAS-0001", "type": "VERMAS", "bl_number": "BL42", "batch_id": "b-7"}


def _celery_body(*args: Any, **kwargs: Any) -> bytes:
    return json.dumps([list(args), kwargs, {"callbacks": None}]).encode()


def _death(reason: str, queue: str = "edi.customs") -> dict[str, Any]:
    return {
        "task": "edi.customs.submit",
        "id": "task-id-1",
        "x-death": [{"count": 1, "reason": reason, "queue": queue, "exchange": ""}],
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
    }


def test_a_delivery_limit_letter_is_keyed_like_the_unit_and_says_why() -> None:
    letter = letter_from_dead_message(
        _celery_body(ENVELOPE),
        content_type="application/json",
        headers=_death("delivery_limit"),
        delivery_limit=4,
    )

    assert letter.key == "VERMAS-0001"
    assert letter.task == "edi.customs.submit"
    assert letter.exception == BROKER_DEAD_LETTERED
    assert letter.attempts == 5
    assert "delivered 5 times" in letter.reason
    assert "edi.customs" in letter.reason
    assert "delivery limit" in letter.reason
    assert letter.payload == {
        "task": "edi.customs.submit",
        "args": [ENVELOPE],
        "kwargs": {},
        "queue": "edi.customs",
    }
    assert (letter.bl_number, letter.batch_id) == ("BL42", "b-7")


def test_an_explicit_idempotency_key_wins_then_the_task_id() -> None:
    by_kwarg = letter_from_dead_message(
        _celery_body(ENVELOPE, idempotency_key="k-9"),
        content_type="application/json",
        headers=_death("rejected"),
        delivery_limit=4,
    )
    by_id = letter_from_dead_message(
        _celery_body("no envelope"),
        content_type="application/json",
        headers=_death("rejected"),
        delivery_limit=4,
    )

    assert by_kwarg.key == "k-9"
    assert by_id.key == "task-id-1"
    assert by_id.attempts == 1
    assert "rejected it without requeue" in by_id.reason


def test_a_pickle_message_is_kept_raw_and_never_unpickled() -> None:
    """A worker refuses pickle; the broker dead-letters it; the letter holds the bytes."""
    raw = b"\x80\x04\x95 not for unpickling"

    letter = letter_from_dead_message(
        raw,
        content_type="application/x-python-serialize",
        headers=_death("rejected", queue="edi.tos"),
        delivery_limit=4,
    )

    assert letter.key == "task-id-1"
    assert base64.b64decode(letter.payload["raw"]) == raw
    assert letter.payload["content_type"] == "application/x-python-serialize"
    assert "args" not in letter.payload
    assert "edi.tos" in letter.reason


def test_a_message_without_headers_or_id_gets_a_stable_key() -> None:
    first = letter_from_dead_message(b"x", content_type="text/plain", headers={}, delivery_limit=1)
    again = letter_from_dead_message(b"x", content_type="text/plain", headers={}, delivery_limit=1)

    assert first.key == again.key
    assert first.key.startswith("amqp-")
    assert "unknown" in first.reason


# --- against a real RabbitMQ -------------------------------------------------------------


@pytest.fixture
def topology(prefix: str) -> AmqpTopology:
    return AmqpTopology(
        delivery_limit=1,
        dead_letter_exchange=f"{prefix}.dlx",
        dead_letter_queue=f"{prefix}.dead",
    )


@pytest.fixture
def broker(rabbitmq_url: str, prefix: str, topology: AmqpTopology) -> Iterator[Connection]:
    """A connection with confirms; this test's queues and exchange are deleted afterwards."""
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        yield conn
        channel = conn.channel()
        for name in (f"{prefix}.work", topology.dead_letter_queue):
            channel.queue_delete(name)
        channel.exchange_delete(topology.dead_letter_exchange)
        channel.close()


def test_a_message_over_the_delivery_limit_lands_in_tidegates_dlq_with_the_reason(
    broker: Connection, topology: AmqpTopology, redis_client: redis.Redis, prefix: str
) -> None:
    """Delivered twice and requeued each time (what reject_on_worker_lost does for a
    worker that died): the broker dead-letters it and the drain records it once."""
    work = topology.task_queue(f"{prefix}.work")(broker.default_channel)
    declare_dead_letters(broker, topology)
    work.declare()
    broker.Producer(serializer="json").publish(
        [[ENVELOPE], {}, {}],
        routing_key=work.name,
        headers={"task": "edi.customs.submit", "id": "t-1"},
        delivery_mode=2,
    )
    deliveries = 0
    while (message := work.get(no_ack=False)) is not None:
        deliveries += 1
        message.requeue()
        assert deliveries <= 5, "the delivery limit did not end the redeliveries"
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    drain = DeadLetterDrain(broker, dlq, topology=topology)
    moved: list[int] = []
    wait_for(lambda: bool(moved.append(drain.drain_once()) or sum(moved)), 20, "dead-lettered")

    probe = AmqpDepthProbe(broker)
    depth = probe.sample([work.name, topology.dead_letter_queue])
    letter = dlq.get("VERMAS-0001")
    assert deliveries == 2
    assert sum(moved) == 1
    assert len(dlq) == 1
    assert letter is not None
    assert letter.exception == BROKER_DEAD_LETTERED
    assert letter.reason.startswith(f"the broker dead-lettered it from {work.name}")
    assert "delivery limit" in letter.reason
    assert letter.payload["args"] == [ENVELOPE]
    assert (depth[work.name].total, depth[topology.dead_letter_queue].total) == (0, 0)


def test_a_message_a_worker_rejected_keeps_the_workers_reason(
    broker: Connection, topology: AmqpTopology, redis_client: redis.Redis, prefix: str
) -> None:
    """The discard guard writes its letter, then rejects; the broker dead-letters the
    message and the drain found the key. Written again, the broker's vaguer "a worker
    rejected it" replaced "refused untrusted content (pickle)" whenever the drain ran
    before the reader (a flaky fleet test). Now the worker's record stays, and the
    message still leaves the broker; a key no worker recorded gets the broker's letter."""
    dead = declare_dead_letters(broker, topology)
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    worker_letter = dlq.add(
        DeadLetter(
            key="t-3",
            task="edi.tos.push",
            reason="refused untrusted content (pickle)",
            exception="ContentDisallowed",
            attempts=1,
            payload={"task": "edi.tos.push"},
        )
    )
    for task_id in ("t-3", "t-4"):
        broker.Producer(serializer="json").publish(
            {"anything": True},
            exchange=topology.dead_letter_exchange,
            routing_key="",
            headers={**_death("rejected", queue="edi.tos"), "id": task_id},
        )
    drain = DeadLetterDrain(broker, dlq, topology=topology)
    moved: list[int] = []
    wait_for(
        lambda: bool(moved.append(drain.drain_once()) or sum(moved) >= 2), 20, "both dead-lettered"
    )

    kept, unknown = dlq.get("t-3"), dlq.get("t-4")
    assert kept == worker_letter
    assert unknown is not None
    assert unknown.exception == BROKER_DEAD_LETTERED
    assert "rejected it without requeue" in unknown.reason
    assert len(dlq) == 2
    assert AmqpDepthProbe(broker).sample([dead.name])[dead.name].total == 0


def test_a_letter_redis_refuses_stays_in_the_broker(
    broker: Connection, topology: AmqpTopology, prefix: str
) -> None:
    """The DLQ write fails: the message is requeued, not acknowledged — nothing lost."""
    dead = declare_dead_letters(broker, topology)
    broker.Producer(serializer="json").publish(
        [[ENVELOPE], {}, {}],
        exchange=topology.dead_letter_exchange,
        routing_key="",
        headers={"task": "edi.customs.submit", "id": "t-2"},
    )
    unreachable = DeadLetterQueue(redis.Redis(port=1, socket_connect_timeout=0.5), prefix=prefix)
    drain = DeadLetterDrain(broker, unreachable, topology=topology)

    with pytest.raises(BackendUnavailable):
        drain.drain_once()

    probe = AmqpDepthProbe(broker)
    assert probe.sample([dead.name])[dead.name].ready == 1


def test_the_parking_mover_keeps_a_unit_the_broker_refused(
    rabbitmq_url: str, redis_client: redis.Redis, prefix: str, topology: AmqpTopology
) -> None:
    """The queue refuses the publish (full, x-overflow=reject-publish): with publisher
    confirms the mover learns it and the unit stays parked; without, it would be acked
    out of parking and lost."""
    name = f"{prefix}.work"
    app = configure(
        Celery(broker=rabbitmq_url, set_as_current=False),
        CeleryPreset(queues=(name,), routes={}, amqp=topology),
    )
    full = Queue(
        name, routing_key=name, queue_arguments={**topology.queue_arguments(), "x-max-length": 1}
    )
    app.conf.task_queues = [full]
    lot = ParkingLot(redis_client, prefix=prefix)
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        bound = full(conn.default_channel)
        bound.declare()
        accepted = _fill(conn, name)
        lot.park({"task": "edi.tos.push", "args": [ENVELOPE], "queue": name}, delay_s=0, reason="t")
        mover = ParkingMover(app, lot)
        try:
            with pytest.raises(OperationalError) as refused:
                mover.move_once()
            depth = AmqpDepthProbe(conn).sample([name])[name]
            assert isinstance(refused.value.__cause__, MessageNacked)
            assert lot.depth() == 1
            assert depth.ready == accepted
        finally:
            bound.delete()
            app.close()


def _fill(conn: Connection, name: str) -> int:
    """Publish until the queue refuses one (a quorum queue takes one past its length
    limit); returns how many it took."""
    producer = conn.Producer(serializer="json")
    for n in range(10):
        try:
            producer.publish({"filler": n}, routing_key=name)
        except MessageNacked:
            return n
    raise AssertionError("the queue never refused a publish")
