"""How a replay from the page sends a dead letter back: a Celery producer.

The same message ``tidegate dlq replay`` sends — the record's task, arguments and
queue, with the replay number in a header — so a unit replayed from the console is
indistinguishable from one replayed from the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidegate.load.dlq import DeadLetter

__all__ = ["celery_publisher"]


def celery_publisher(broker_url: str) -> tuple[Callable[[DeadLetter], None], Callable[[], None]]:
    """``(publish, close)`` over a Celery producer for ``broker_url``."""
    from celery import Celery

    from tidegate.integrations.celery.gated import REPLAY_HEADER

    producer: Any = Celery("tidegate-console", broker=broker_url)

    def publish(letter: DeadLetter) -> None:
        producer.send_task(
            letter.task,
            args=letter.payload.get("args", []),
            kwargs=letter.payload.get("kwargs", {}),
            queue=letter.payload.get("queue"),
            headers={REPLAY_HEADER: letter.replays + 1},
        )

    return publish, producer.close
