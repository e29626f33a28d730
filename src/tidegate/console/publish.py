"""How a replay from the page sends a dead letter back: a Celery producer.

The same message ``tidegate dlq replay`` sends — the record's task, arguments and
queue, with the replay number in a header — so a unit replayed from the console is
indistinguishable from one replayed from the command line.
"""

from __future__ import annotations

from collections.abc import Callable

from tidegate.load.dlq import DeadLetter

__all__ = ["celery_publisher"]


def celery_publisher(broker_url: str) -> tuple[Callable[[DeadLetter], None], Callable[[], None]]:
    """``(publish, close)`` over a Celery producer for ``broker_url``: the one
    :func:`~tidegate.integrations.celery.replay.celery_replay_publisher`."""
    from tidegate.integrations.celery.replay import celery_replay_publisher

    return celery_replay_publisher(broker_url)
