"""Draining RabbitMQ's dead letters into tidegate's DLQ, with the broker's reason.

The broker dead-letters a message when a quorum queue's delivery limit is reached (a
task that keeps killing its worker), when a worker rejects it without requeue (content
it refuses, such as pickle) and when a TTL or length policy ends it. Left in the
dead-letter queue it would be invisible to ``tidegate dlq`` and to replays, so the
drain moves each one into the same :class:`~tidegate.load.DeadLetterQueue` as the
letters tidegate writes itself, keyed by the unit's idempotency key.

A message is acknowledged only after its letter is written to Redis: a drain that
dies in between leaves it in the queue, and the next drain writes the same record
again (one record per key, ``attempts`` + 1), so nothing is lost between the two.

:func:`letter_from_dead_message` is the whole decision, without I/O; the drain only
fetches, writes and acknowledges.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidegate.delivery import unit_key
from tidegate.errors import BackendError
from tidegate.integrations.celery.amqp_topology import AmqpTopology, declare_dead_letters
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from kombu import Connection

__all__ = [
    "BROKER_DEAD_LETTERED",
    "DEFAULT_DRAIN_BATCH",
    "DeadLetterDrain",
    "letter_from_dead_message",
]

log = get_logger("tidegate.celery")

#: Messages moved per :meth:`DeadLetterDrain.drain_once`, so one call stays short.
DEFAULT_DRAIN_BATCH = 100
#: The ``exception`` of a letter the broker dead-lettered (no task raised anything).
BROKER_DEAD_LETTERED = "BrokerDeadLettered"

#: Why the broker dead-lettered a message (``x-death`` reason) → the letter's reason.
_REASONS = {
    "delivery_limit": "the broker dead-lettered it from {queue}: delivered {deliveries} "
    "times without an acknowledgement (delivery limit; a worker was lost each time)",
    "rejected": "a worker on {queue} rejected it without requeue "
    "(content the worker refuses, or a task it does not know)",
    "expired": "it expired in {queue} (message TTL)",
    "maxlen": "{queue} was over its length limit",
}


def letter_from_dead_message(
    body: bytes,
    *,
    content_type: str,
    headers: Mapping[str, Any],
    delivery_limit: int,
) -> DeadLetter:
    """The DLQ record for one dead-lettered Celery message.

    The key is the one :class:`~tidegate.integrations.celery.GatedTask` uses
    (``kwargs["idempotency_key"]``, an envelope's ``"key"``, else the task id), so a
    unit tidegate dead-lettered itself and one the broker dead-lettered are one record.
    A body that is not Celery's JSON is kept base64-encoded under ``payload["raw"]``
    and never deserialized (it may be pickle).

    Args:
        body: the raw message body.
        content_type: the message's content type.
        headers: its application headers (Celery's ``task``/``id``, the broker's
            ``x-death`` / ``x-first-death-*``).
        delivery_limit: the queue's delivery limit, to report the deliveries made.
    """
    queue, reason_code = _death(headers)
    task = str(headers.get("task") or "")
    task_id = str(headers.get("id") or "")
    args, kwargs = _celery_body(body, content_type)
    if args is None or kwargs is None:
        payload: dict[str, Any] = {
            "task": task,
            "queue": queue,
            "content_type": content_type,
            "raw": base64.b64encode(body).decode("ascii"),
        }
        key = task_id or "amqp-" + hashlib.sha256(body).hexdigest()[:32]
    else:
        payload = {"task": task, "args": args, "kwargs": kwargs, "queue": queue}
        key = unit_key(args, kwargs) or task_id or "amqp-" + hashlib.sha256(body).hexdigest()[:32]
    deliveries = delivery_limit + 1 if reason_code == "delivery_limit" else 1
    template = _REASONS.get(reason_code, "the broker dead-lettered it from {queue} ({code})")
    envelope = args[0] if args and isinstance(args[0], Mapping) else {}
    return DeadLetter(
        key=key,
        task=task,
        reason=template.format(queue=queue, deliveries=deliveries, code=reason_code),
        exception=BROKER_DEAD_LETTERED,
        attempts=deliveries,
        payload=payload,
        bl_number=_str_or_none(envelope.get("bl_number")),
        batch_id=_str_or_none(envelope.get("batch_id")),
    )


def _death(headers: Mapping[str, Any]) -> tuple[str, str]:
    """(queue, reason) of the first dead-lettering, from RabbitMQ's headers."""
    queue = headers.get("x-first-death-queue")
    reason = headers.get("x-first-death-reason")
    deaths = headers.get("x-death")
    if (queue is None or reason is None) and isinstance(deaths, list) and deaths:
        first = deaths[-1] if isinstance(deaths[-1], Mapping) else {}
        queue = queue if queue is not None else first.get("queue")
        reason = reason if reason is not None else first.get("reason")
    return str(queue or "?"), str(reason or "unknown")


def _celery_body(body: bytes, content_type: str) -> tuple[list[Any] | None, dict[str, Any] | None]:
    """``(args, kwargs)`` of a Celery protocol-2 JSON body, or ``(None, None)``."""
    if content_type != "application/json":
        return None, None
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None
    if (
        isinstance(decoded, list)
        and len(decoded) == 3
        and isinstance(decoded[0], list)
        and isinstance(decoded[1], dict)
    ):
        return decoded[0], decoded[1]
    return None, None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


class DeadLetterDrain:
    """Moves messages from the broker's dead-letter queue into tidegate's DLQ.

    Args:
        connection: a ``kombu.Connection`` to the broker.
        dlq: tidegate's DLQ (on Redis, whatever the broker).
        topology: names the dead-letter exchange and queue (declared on first use)
            and the delivery limit reported in reasons.
        batch: most messages moved per :meth:`drain_once`.

    Example::

        drain = DeadLetterDrain(app.connection_for_write(), runtime(app).dlq)
        drain.drain_once()
    """

    def __init__(
        self,
        connection: Connection,
        dlq: DeadLetterQueue,
        *,
        topology: AmqpTopology | None = None,
        batch: int = DEFAULT_DRAIN_BATCH,
    ) -> None:
        self.connection = connection
        self.dlq = dlq
        self.topology = topology or AmqpTopology()
        self.batch = batch
        self._queue: Any = None

    def declare(self) -> None:
        """Declare the dead-letter exchange and queue now (idempotent; also done lazily)."""
        self._queue = declare_dead_letters(self.connection, self.topology)

    def drain_once(self) -> int:
        """Move what the dead-letter queue holds now (at most ``batch``); returns how many.

        Raises:
            BackendError: Redis refused a letter; that message stays in the queue.
        """
        if self._queue is None:
            self.declare()
        moved = 0
        while moved < self.batch:
            message = self._queue.get(no_ack=False)
            if message is None:
                break
            body = message.body
            headers = message.headers or {}
            letter = letter_from_dead_message(
                body if isinstance(body, bytes) else str(body).encode(),
                content_type=str(message.content_type or ""),
                headers=headers,
                delivery_limit=self.topology.delivery_limit,
            )
            try:
                if self._already_recorded(letter, headers):
                    log.info(
                        "broker_dead_letter_already_recorded", key=letter.key, task=letter.task
                    )
                else:
                    self.dlq.add(letter)
            except BackendError:
                message.requeue()
                log.warning("broker_dead_letter_requeued", key=letter.key, task=letter.task)
                raise
            message.ack()
            moved += 1
        if moved:
            log.info("broker_dead_letters_drained", letters=moved)
        return moved

    def _already_recorded(self, letter: DeadLetter, headers: Mapping[str, Any]) -> bool:
        """The broker's letter of a message a worker rejected after writing its own.

        tidegate's discard guard writes the letter (``refused untrusted content
        (pickle)``, ``unknown task``) *before* it rejects the message, and the broker
        then dead-letters it: its "a worker rejected it" says less and, written second,
        replaced the worker's reason (seen as a flaky ``test_pickle_message_is_refused_
        and_reported[amqp]``). A record of the key that a worker wrote and no replay has
        handed out since is that same decision; anything else — no record, a broker's
        own, a unit out on replay — is written.
        """
        if _death(headers)[1] != "rejected":
            return False
        known = self.dlq.get(letter.key)
        return (
            known is not None
            and known.exception != BROKER_DEAD_LETTERED
            and known.in_replay_until is None
        )
