"""The publish-side admission for RQ: ``queue.count`` as depth, ``enqueue`` as sender."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from rq.registry import StartedJobRegistry

from tidegate._redis import map_redis_errors
from tidegate.integrations.rq._serializer import json_queue
from tidegate.keys import DEFAULT_PREFIX
from tidegate.load.admission import Admission
from tidegate.load.depth import QueueDepth
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import LoadBoard, WatermarkStore
from tidegate.settings import Settings

__all__ = ["RqDepthProbe", "RqSender", "rq_admission"]


class RqDepthProbe:
    """Depth of RQ queues: ``queue.count`` (waiting) + the started-job registry (running).

    Args:
        connection: RQ's Redis.
    """

    broker = "rq"

    def __init__(self, connection: redis.Redis) -> None:
        self.connection = connection

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        result = {}
        with map_redis_errors("rq queue depth"):
            for name in dict.fromkeys(queues):
                queue = json_queue(name, self.connection)
                started = StartedJobRegistry(name, connection=self.connection)
                # Not ``started.count``: that cleans the registry up, and a cleanup
                # without the workers' exception handlers fails an abandoned job
                # (a killed worker's) instead of giving it back to its queue.
                running = started.get_job_count(cleanup=False)
                result[name] = QueueDepth(name, ready=queue.count, unacked=running)
        return result

    def close(self) -> None:
        self.connection.close()


class RqSender:
    """Sends with ``Queue(queue).enqueue(task, payload)`` (``task`` is a function path),
    as JSON: tidegate's RQ workers refuse anything else."""

    name = "rq"

    def __init__(self, connection: redis.Redis, **enqueue_options: Any) -> None:
        self.connection = connection
        self.options = enqueue_options

    def send(self, queue: str, task: str, payload: Mapping[str, Any]) -> None:
        with map_redis_errors("rq enqueue"):
            json_queue(queue, self.connection).enqueue(task, args=[dict(payload)], **self.options)


def rq_admission(
    connection: redis.Redis,
    tasks: Mapping[str, str],
    *,
    client: redis.Redis | None = None,
    prefix: str = DEFAULT_PREFIX,
    settings: Settings | None = None,
    **options: Any,
) -> Admission:
    """An :class:`~tidegate.load.admission.Admission` for RQ queues.

    Args:
        connection: RQ's Redis.
        tasks: queue → job function path (``"myapp.jobs.lodge"``).
        client: tidegate's Redis (quarantine, board, watermarks); RQ's by default.
        prefix: tidegate's key prefix.
        settings: the process's settings (watermark defaults, shedding policy);
            the built-in values when omitted.
        options: the other keyword arguments of :class:`Admission`.
    """
    store = client if client is not None else connection
    settings = settings if settings is not None else Settings.load({})
    marks = WatermarkStore(store, prefix=prefix, defaults=settings.watermarks)
    return Admission(
        RqSender(connection),
        tasks,
        probe=options.pop("probe", RqDepthProbe(connection)),
        quarantine=Quarantine(store, prefix=prefix),
        settings=settings,
        watermarks=options.pop("watermarks", marks),
        board=options.pop("board", LoadBoard(store, prefix=prefix)),
        **options,
    )
