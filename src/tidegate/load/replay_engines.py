"""One replay publisher for every engine: a dead letter goes back the way it came.

A :class:`~tidegate.load.DeadLetter` says which engine its unit belongs to
(``engine``); this picks Celery's publisher (``send_task`` over the broker, configured
like the workers) or RQ's (``enqueue`` to its RQ queue) per letter, building each only
when a letter needs it.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate._redis import client_from_url
from tidegate.errors import ConfigurationError
from tidegate.load.dlq import DeadLetter

__all__ = ["engine_replay_publisher"]

Publish = Callable[[DeadLetter], None]


def engine_replay_publisher(*, broker_url: str, rq_url: str) -> tuple[Publish, Callable[[], None]]:
    """``(publish, close)``: republish a letter through its own engine.

    Args:
        broker_url: the Celery broker, for ``engine: celery`` letters.
        rq_url: RQ's Redis, for ``engine: rq`` letters.
    """
    publishers: dict[str, Publish] = {}
    closers: list[Callable[[], None]] = []

    def publisher(engine: str) -> Publish:
        if engine not in publishers:
            if engine == "celery":
                from tidegate.integrations.celery.replay import celery_replay_publisher

                publish, close = celery_replay_publisher(broker_url)
            elif engine == "rq":
                from tidegate.integrations.rq.replay import rq_replay_publisher

                connection = client_from_url(rq_url)
                publish, close = rq_replay_publisher(connection), connection.close
            else:
                raise ConfigurationError(f"no replay for engine {engine!r}")
            publishers[engine] = publish
            closers.append(close)
        return publishers[engine]

    def publish(letter: DeadLetter) -> None:
        publisher(letter.engine)(letter)

    def close() -> None:
        for closer in closers:
            closer()

    return publish, close
