"""How a dead letter goes back to its queue on Celery: one publisher for every caller.

``tidegate dlq replay`` and the console's replay send the same message — the record's
task, arguments and queue, with the replay number in a header — through a producer
configured like the workers: on RabbitMQ every publish waits for the broker's confirm and
the letter's queue is declared with the workers' arguments (a plain declaration of a
quorum queue is refused). A letter that holds a raw message body (a message Celery could
not decode, a pickle) is not a task to republish: it is refused with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.errors import ConfigurationError
from tidegate.load.dlq import DeadLetter
from tidegate.logging import key_hash

__all__ = ["celery_replay_publisher"]


def celery_replay_publisher(
    broker_url: str,
) -> tuple[Callable[[DeadLetter], None], Callable[[], None]]:
    """``(publish, close)`` over a producer for ``broker_url``, configured like the workers.

    ``publish`` raises :class:`~tidegate.errors.ConfigurationError` for a letter that
    carries a raw body instead of task arguments: nothing is sent.
    """
    from celery import Celery

    from tidegate.integrations.celery.gated import REPLAY_HEADER
    from tidegate.integrations.celery.preset import configure, ensure_queue

    producer = configure(Celery("tidegate-replay", broker=broker_url))

    def publish(letter: DeadLetter) -> None:
        encoding = letter.payload.get("body_encoding")
        if encoding is not None or not letter.task:
            raise ConfigurationError(
                f"dead letter {key_hash(letter.key)} holds a raw message body "
                f"({encoding or 'no task name'}), not a task: fix the producer and resend it"
            )
        queue = letter.payload.get("queue")
        if queue:
            ensure_queue(producer, str(queue))
        producer.send_task(
            letter.task,
            args=letter.payload.get("args", []),
            kwargs=letter.payload.get("kwargs", {}),
            queue=queue,
            headers={REPLAY_HEADER: letter.replays + 1},
            ignore_result=True,
        )

    return publish, producer.close
