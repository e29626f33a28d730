"""Replaying an RQ dead letter: enqueue the function back to its RQ queue, as JSON.

The job carries the replay number in :data:`~tidegate.integrations.rq.REPLAY_META`:
the lifecycle asks the downstream before sending it (the unit may have landed after
all) and, once it is delivered, removes the dead letter.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from tidegate.errors import ConfigurationError
from tidegate.integrations.rq._serializer import json_queue
from tidegate.integrations.rq.engine import REPLAY_META
from tidegate.load.dlq import DeadLetter
from tidegate.logging import key_hash

__all__ = ["rq_replay_publisher"]


def rq_replay_publisher(connection: redis.Redis) -> Callable[[DeadLetter], None]:
    """``publish(letter)``: enqueue an ``engine: rq`` letter's function to its queue.

    Raises :class:`~tidegate.errors.ConfigurationError` for a letter that names no
    function or queue (a refused, unreadable job): nothing is enqueued.
    """

    def publish(letter: DeadLetter) -> None:
        queue = letter.payload.get("queue")
        if not letter.task or not queue:
            raise ConfigurationError(
                f"dead letter {key_hash(letter.key)} names no RQ function or queue "
                "(an unreadable job): fix the producer and resend it"
            )
        json_queue(str(queue), connection).enqueue(
            letter.task,
            args=list(letter.payload.get("args", [])),
            kwargs=dict(letter.payload.get("kwargs", {})),
            meta={REPLAY_META: letter.replays + 1},
        )

    return publish
