"""`tidegate dlq replay` on RabbitMQ: into the workers' quorum queues, with confirms."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from celery import Celery
from click.testing import CliRunner
from kombu import Connection

from tidegate.cli import cli
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.depth import AmqpDepthProbe
from tidegate.integrations.celery.preset import ensure_queue
from tidegate.load import DeadLetter, DeadLetterQueue


@pytest.fixture
def worker_queue(rabbitmq_url: str, prefix: str) -> Iterator[str]:
    """A queue declared the way a worker whose preset lists it declares it."""
    name = f"{prefix}.replayq"
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


def test_dlq_replay_publishes_into_a_workers_quorum_queue(
    rabbitmq_url: str,
    redis_url: str,
    redis_client: redis.Redis,
    prefix: str,
    worker_queue: str,
) -> None:
    """The letter's queue is not in the replaying app's preset: it is declared with the
    workers' quorum arguments, so the broker accepts it (a plain app got a 406)."""
    dlq = DeadLetterQueue(redis_client, prefix=prefix)
    dlq.add(
        DeadLetter(
            key="replay-1",
            task="edi.tos.push",
            reason="downstream rejected the document (HTTP 422)",
            payload={"args": [{"key": "replay-1"}], "kwargs": {}, "queue": worker_queue},
        )
    )

    result = CliRunner().invoke(
        cli,
        ["dlq", "replay", "--prefix", prefix, "--broker-url", rabbitmq_url],
        env={"TIDEGATE_REDIS_URL": redis_url},
    )

    with Connection(rabbitmq_url) as conn:
        depth = AmqpDepthProbe(conn).sample([worker_queue])[worker_queue]
    assert result.exit_code == 0, result.output
    assert "replayed 1 dead letter" in result.output
    assert depth.ready == 1


def test_ensure_queue_adds_the_workers_declaration_on_rabbitmq_only() -> None:
    amqp_app = configure(Celery(broker="amqp://guest@127.0.0.1:1//", set_as_current=False))
    redis_app = configure(Celery(broker="redis://127.0.0.1:1/0", set_as_current=False))

    ensure_queue(amqp_app, "port.extra")
    ensure_queue(redis_app, "port.extra")

    added = amqp_app.amqp.queues["port.extra"]
    assert added.queue_arguments["x-queue-type"] == "quorum"
    assert added.queue_arguments["x-delivery-limit"] == 10
    assert "port.extra" not in redis_app.amqp.queues
