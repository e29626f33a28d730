"""Queue depth: the one number per queue that the inbound controls start from.

The autoscaler, the watermarks and the shedding policy read :class:`QueueDepth`
samples through the :class:`DepthProbe` protocol; how a broker is read is the
integration's business: kombu's Redis layout and RabbitMQ's passive declares are in
:mod:`tidegate.integrations.celery.depth` (``probe_for_app``, ``probe_from_url``), RQ's
queues in :mod:`tidegate.integrations.rq`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tidegate.errors import ConfigurationError

__all__ = ["DepthProbe", "QueueDepth", "check_queues"]


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One queue, sampled once.

    Attributes:
        queue: the queue name.
        ready: messages waiting to be delivered (every priority sub-queue).
        unacked: messages delivered to a worker and not acknowledged yet (reserved,
            prefetched or running); on RabbitMQ from the management API, 0 without it.
        consumers: consumers attached (RabbitMQ), ``None`` where unknown (Redis).
        by_priority: ``(priority step, ready messages)`` per sub-queue (Redis only).
    """

    queue: str
    ready: int
    unacked: int = 0
    consumers: int | None = None
    by_priority: tuple[tuple[int, int], ...] = field(default=())

    @property
    def total(self) -> int:
        """Work in the system not finished yet: ``ready + unacked`` (the watermarks' depth)."""
        return self.ready + self.unacked

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "ready": self.ready,
            "unacked": self.unacked,
            "total": self.total,
            "consumers": self.consumers,
        }


@runtime_checkable
class DepthProbe(Protocol):
    """Reads the depth of queues from one broker."""

    #: ``"redis"``, ``"amqp"`` or ``"rq"``: for log events and metrics labels.
    broker: str

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        """One reading of every queue in ``queues`` (a missing queue has depth 0)."""
        ...

    def close(self) -> None:
        """Release the broker connection."""
        ...


def check_queues(queues: Sequence[str]) -> list[str]:
    """The distinct queue names of a sample request, in order (a probe's argument check)."""
    names = list(dict.fromkeys(queues))
    if not names or any(not isinstance(q, str) or not q for q in names):
        raise ConfigurationError(f"queues must be non-empty names, got {list(queues)!r}")
    return names
