"""`tidegate monitor` on RabbitMQ: replays publish into the workers' quorum queues."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import click
import pytest
import redis
from celery import Celery
from click.testing import CliRunner
from kombu import Connection, Queue

from tidegate.cli.monitor import build_replay_admission, metrics, monitor, watermarks
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.depth import AmqpDepthProbe
from tidegate.logging import configure as configure_logging


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


def _invoke(command: click.Command, args: list[str], redis_url: str) -> tuple[int, str]:
    configure_logging(level="INFO", stream=io.StringIO())
    result = CliRunner().invoke(command, [*args, "--redis-url", redis_url])
    return result.exit_code, result.output


def test_monitor_and_metrics_on_rabbitmq_count_ready_unacked_and_consumers(
    rabbitmq_url: str,
    rabbitmq_management_url: str,
    redis_url: str,
    prefix: str,
    worker_queue: str,
) -> None:
    """29 ready + 1 held by a consumer over an HWM of 20: the monitor's JSON and the
    Prometheus exposition show the same figures as on Redis, consumers included."""
    held: list[Any] = []
    with Connection(rabbitmq_url, transport_options={"confirm_publish": True}) as conn:
        producer = conn.Producer(serializer="json")
        for n in range(30):
            producer.publish({"n": n}, routing_key=worker_queue)
        consumer = conn.Consumer(
            [Queue(worker_queue, no_declare=True)],
            prefetch_count=1,
            callbacks=[lambda _body, message: held.append(message)],
        )
        with consumer:
            conn.drain_events(timeout=5)
            probe = AmqpDepthProbe(rabbitmq_url, management_url=rabbitmq_management_url)
            deadline = time.monotonic() + 20
            while probe.sample([worker_queue])[worker_queue].unacked < 1:
                assert time.monotonic() < deadline, "the management API never showed the unacked"
                time.sleep(0.2)
            probe.close()
            _invoke(watermarks, ["set", "--prefix", prefix, "--hwm", "20", "--lwm", "5"], redis_url)
            code, out = _invoke(
                monitor,
                [
                    *("--prefix", prefix, "--broker-url", rabbitmq_url, "--queue", worker_queue),
                    *("--interval", "0.05", "--iterations", "2", "--no-replay"),
                ],
                redis_url,
            )
            metrics_code, exposition = _invoke(metrics, ["--prefix", prefix, "--once"], redis_url)

    state = json.loads(out[out.index("{") :])[worker_queue]
    assert code == 0, out
    assert (state["depth"], state["signal"], state["over_hwm_intervals"]) == (30, "scale_out", 2)
    assert metrics_code == 0, exposition
    assert f'tidegate_queue_messages{{queue="{worker_queue}",state="ready"}} 29.0' in exposition
    assert f'tidegate_queue_messages{{queue="{worker_queue}",state="unacked"}} 1.0' in exposition
    assert f'tidegate_queue_consumers{{queue="{worker_queue}"}} 1.0' in exposition
    assert len(held) == 1
