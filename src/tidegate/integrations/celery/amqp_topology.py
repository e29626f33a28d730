"""The RabbitMQ topology of a fleet: quorum queues that never drop a message.

A task queue is a quorum queue (replicated, and the queue type RabbitMQ keeps
developing) with a **delivery limit**. With ``acks_late`` and
``task_reject_on_worker_lost`` a message whose task kills its worker is redelivered,
and a poison message would kill workers forever; the limit ends that loop. What it
ends is not dropped: it goes to the dead-letter exchange with
``x-dead-letter-strategy=at-least-once``, under which the queue keeps the message until
the dead-letter queue has confirmed it (RabbitMQ's default, at-most-once, loses it when
the exchange has no route). That strategy requires ``x-overflow=reject-publish``: a
full queue refuses new publishes (the publisher's confirm fails) instead of discarding
its oldest message. No length limit is set, so that path stays closed unless an
operator adds one by policy.

The dead-letter exchange is a fanout into one classic durable queue — classic, because
a quorum queue's own delivery limit would apply to the drain's requeues too. tidegate
drains it into its DLQ with the broker's reason
(:mod:`tidegate.integrations.celery.amqp_drain`). Nothing here does I/O except
:func:`declare_dead_letters`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kombu import Exchange, Queue

from tidegate.errors import ConfigurationError

if TYPE_CHECKING:
    from kombu import Connection

__all__ = [
    "AMQP_SCHEMES",
    "DEFAULT_DEAD_LETTER_EXCHANGE",
    "DEFAULT_DEAD_LETTER_QUEUE",
    "DEFAULT_DELIVERY_LIMIT",
    "AmqpTopology",
    "declare_dead_letters",
    "is_amqp_url",
]

#: URL schemes kombu serves with an AMQP 0-9-1 transport (RabbitMQ).
AMQP_SCHEMES: tuple[str, ...] = ("amqp", "amqps", "pyamqp", "librabbitmq")
#: Redeliveries a message gets before the broker dead-letters it. Only a crashed or
#: killed worker causes one (tidegate parks and acks instead of requeueing), so ten is
#: far above what a healthy message sees and low enough to stop a poison message soon.
DEFAULT_DELIVERY_LIMIT = 10
#: The exchange every task queue dead-letters into.
DEFAULT_DEAD_LETTER_EXCHANGE = "tidegate.dlx"
#: The queue bound to it, which tidegate drains into its DLQ.
DEFAULT_DEAD_LETTER_QUEUE = "tidegate.dead-letters"
#: RabbitMQ's ceiling for a delivery limit is a 32-bit counter; anything near it is a typo.
_MAX_DELIVERY_LIMIT = 1_000_000


def is_amqp_url(url: str) -> bool:
    """Whether ``url`` names a RabbitMQ broker (the schemes in :data:`AMQP_SCHEMES`)."""
    return urlsplit(url).scheme in AMQP_SCHEMES


@dataclass(frozen=True, slots=True)
class AmqpTopology:
    """How task queues are declared on RabbitMQ.

    Args:
        quorum: declare task queues as quorum queues with the delivery limit and the
            dead-letter exchange (default); ``False`` keeps classic queues with no
            limit, for a broker older than 3.10.
        delivery_limit: deliveries after which the broker dead-letters a message.
        dead_letter_exchange: the fanout exchange dead letters go to.
        dead_letter_queue: the queue bound to it, drained into tidegate's DLQ.

    Raises:
        ConfigurationError: a limit outside ``[1, 1_000_000]`` or an empty name.
    """

    quorum: bool = True
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    dead_letter_exchange: str = DEFAULT_DEAD_LETTER_EXCHANGE
    dead_letter_queue: str = DEFAULT_DEAD_LETTER_QUEUE

    def __post_init__(self) -> None:
        limit = self.delivery_limit
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ConfigurationError(f"delivery_limit must be an integer, got {limit!r}")
        if not 1 <= limit <= _MAX_DELIVERY_LIMIT:
            raise ConfigurationError(
                f"delivery_limit must be in [1, {_MAX_DELIVERY_LIMIT}], got {limit!r}"
            )
        for name in ("dead_letter_exchange", "dead_letter_queue"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigurationError(f"{name} must be a non-empty name, got {value!r}")

    def queue_arguments(self) -> dict[str, Any]:
        """The ``x-`` arguments of every task queue (empty for classic queues)."""
        if not self.quorum:
            return {}
        return {
            "x-queue-type": "quorum",
            "x-delivery-limit": self.delivery_limit,
            "x-dead-letter-exchange": self.dead_letter_exchange,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }

    def task_queue(self, name: str) -> Queue:
        """Task queue ``name``, routed by its own name, declared with :meth:`queue_arguments`."""
        return Queue(name, routing_key=name, durable=True, queue_arguments=self.queue_arguments())

    def dead_letter_queues(self) -> tuple[Exchange, Queue]:
        """The dead-letter exchange and the queue bound to it."""
        exchange = Exchange(self.dead_letter_exchange, type="fanout", durable=True)
        queue = Queue(
            self.dead_letter_queue,
            exchange,
            routing_key="",
            durable=True,
            queue_arguments={"x-queue-type": "classic"},
        )
        return exchange, queue


def declare_dead_letters(connection: Connection, topology: AmqpTopology) -> Queue:
    """Declare the dead-letter exchange and queue (idempotent); returns the queue, bound."""
    exchange, queue = topology.dead_letter_queues()
    channel = connection.default_channel
    exchange(channel).declare()
    bound: Queue = queue(channel)
    bound.declare()
    return bound
