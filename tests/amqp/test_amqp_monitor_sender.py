"""`tidegate monitor` on RabbitMQ: replays publish into the workers' quorum queues."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from kombu import Connection

from tidegate.cli.monitor import build_replay_admission
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.load.depth import AmqpDepthProbe


@pytest.fixture
def worker_queue(rabbitmq_url: str, prefix: str) -> Iterator[str]:
    """A queue declared the way a worker declares it (the preset's quorum arguments)."""
    name = f"{prefix}.replay"
    app = configure(
        Celery(broker=rabbitmq_url, set_as_current=False),
        CeleryPreset(queues=(name,), routes={}),
    )
    with app.connection_for_write() as conn:
        app.conf.task_queues[0](conn.default_channel).declare()
    app.close()
    yield name
    with Connection(rabbitmq_url) as conn:
        conn.channel().queue_delete(name)


def test_the_monitors_replay_sender_publishes_into_a_workers_quorum_queue(
    rabbitmq_url: str, redis_client: redis.Redis, prefix: str, worker_queue: str
) -> None:
    """The sender declares the queue as the workers do and waits for the broker's
    confirm; a plain Celery app would declare a classic queue and be refused (406)."""
    admission = build_replay_admission(
        redis_client, rabbitmq_url, [worker_queue], prefix=prefix, sender="celery"
    )

    admission.sender.send(worker_queue, "edi.tos.push", {"key": "replayed-1"})

    with Connection(rabbitmq_url) as conn:
        depth = AmqpDepthProbe(conn).sample([worker_queue])[worker_queue]
    admission.probe.close()
    assert depth.ready == 1
    assert admission.sender.app.conf.broker_transport_options["confirm_publish"] is True
