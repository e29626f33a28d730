"""The Celery preset on a RabbitMQ broker: quorum queues, dead-lettering, confirms."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from tidegate.errors import ConfigurationError
from tidegate.integrations.celery import CeleryPreset, configure
from tidegate.integrations.celery.amqp_topology import (
    DEFAULT_DEAD_LETTER_EXCHANGE,
    DEFAULT_DELIVERY_LIMIT,
    AmqpTopology,
    is_amqp_url,
)

AMQP = "amqp://guest:guest@127.0.0.1:1//"


def test_amqp_task_queues_are_quorum_with_a_delivery_limit_and_a_dead_letter_exchange() -> None:
    """Every task queue is declared so the broker dead-letters, at least once, instead
    of redelivering a poison message forever or dropping what it gives up on."""
    app = configure(Celery(broker=AMQP, set_as_current=False))

    queues = app.conf.task_queues

    assert [q.name for q in queues] == ["edi.customs", "edi.tos", "bulk.dispatch", "bl.parse"]
    for queue in queues:
        assert queue.durable is True
        assert queue.queue_arguments == {
            "x-queue-type": "quorum",
            "x-delivery-limit": DEFAULT_DELIVERY_LIMIT,
            "x-dead-letter-exchange": DEFAULT_DEAD_LETTER_EXCHANGE,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }
    assert app.conf.task_create_missing_queue_type == "quorum"


def test_amqp_publishes_wait_for_the_broker_confirm_and_keep_the_operator_options() -> None:
    app = Celery(broker=AMQP, set_as_current=False)
    app.conf.broker_transport_options = {"max_retries": 3}

    configure(app)

    assert app.conf.broker_transport_options == {"max_retries": 3, "confirm_publish": True}
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.accept_content == ["json"]


def test_a_redis_broker_gets_neither_quorum_arguments_nor_confirms() -> None:
    """Those options mean nothing to kombu's Redis transport: the Redis preset is unchanged."""
    app = configure(Celery(broker="redis://127.0.0.1:1/0", set_as_current=False))

    assert all(not q.queue_arguments for q in app.conf.task_queues)
    assert "confirm_publish" not in dict(app.conf.broker_transport_options or {})


def test_the_topology_is_taken_from_the_preset() -> None:
    topology = AmqpTopology(delivery_limit=3, dead_letter_exchange="port.dlx")
    app = configure(
        Celery(broker="pyamqp://h//", set_as_current=False), CeleryPreset(amqp=topology)
    )

    arguments = app.conf.task_queues[0].queue_arguments
    assert (arguments["x-delivery-limit"], arguments["x-dead-letter-exchange"]) == (3, "port.dlx")


def test_classic_queues_on_request() -> None:
    """For a broker without quorum queues (< 3.10): plain durable queues, no limit."""
    app = configure(
        Celery(broker=AMQP, set_as_current=False),
        CeleryPreset(amqp=AmqpTopology(quorum=False)),
    )

    assert all(q.queue_arguments == {} for q in app.conf.task_queues)
    assert app.conf.task_create_missing_queue_type == "classic"
    assert app.conf.broker_transport_options["confirm_publish"] is True


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delivery_limit": 0},
        {"delivery_limit": -1},
        {"delivery_limit": 2_000_000},
        {"delivery_limit": True},
        {"delivery_limit": "5"},
        {"delivery_limit": 2.5},
        {"dead_letter_exchange": ""},
        {"dead_letter_queue": ""},
    ],
)
def test_invalid_topology_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        AmqpTopology(**kwargs)


@pytest.mark.parametrize(
    ("url", "amqp"),
    [
        ("amqp://guest@h//", True),
        ("amqps://guest@h//", True),
        ("pyamqp://h//", True),
        ("redis://h:6379/0", False),
        ("rediss://h:6379/0", False),
        ("sqs://", False),
        ("", False),
    ],
)
def test_is_amqp_url(url: str, amqp: bool) -> None:
    assert is_amqp_url(url) is amqp
