"""What the registry of outstanding units holds and decides, without Redis.

:class:`OutstandingUnit` (what is needed to publish a unit again), the orphan verdict
(:func:`find_orphans`: which units the broker lost, by consecutive misses); the
protocol the gated task, the lifecycle's driver and the orphan sweep see is
:class:`~tidegate.load.protocols.OutstandingStore`.
:class:`tidegate.load.outstanding.Outstanding` is the Redis store;
:class:`tidegate.load.memory.MemoryOutstanding` its one-process twin, held to the same
behaviour suite (``tests/load/stores/test_outstanding_behaviour.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_MISSES",
    "LANE_HEADER",
    "SEQ_HEADER",
    "IndexEntry",
    "OrphanVerdict",
    "OutstandingUnit",
    "find_orphans",
]

#: Consecutive sweeps a unit's message must be missing before it is republished.
DEFAULT_MISSES = 2


@dataclass(frozen=True, slots=True)
class OutstandingUnit:
    """What is needed to publish a unit again, and which message carries it now."""

    key: str
    task: str
    task_id: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    #: The kombu list its message went to, without the broker's key prefix: the queue's
    #: name for priority step 0 (the default), else name + separator + step.
    lane: str = ""

    @property
    def index_lane(self) -> str:
        return self.lane or self.queue

    def to_json(self) -> str:
        data = {
            "task": self.task,
            "task_id": self.task_id,
            "queue": self.queue,
            "args": self.args,
            "kwargs": self.kwargs,
        }
        if self.lane and self.lane != self.queue:
            data["lane"] = self.lane
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, key: str, raw: str | bytes) -> OutstandingUnit:
        data = json.loads(raw)
        return cls(
            key,
            str(data["task"]),
            str(data["task_id"]),
            str(data["queue"]),
            list(data["args"]),
            dict(data["kwargs"]),
            str(data.get("lane") or ""),
        )


@dataclass(frozen=True, slots=True)
class OrphanVerdict:
    """One sweep's decision: whom to republish, and the miss counts to store."""

    orphans: list[OutstandingUnit]
    misses: dict[str, int]


def find_orphans(
    units: Iterable[OutstandingUnit],
    *,
    present_task_ids: set[str],
    parked_keys: set[str],
    misses: Mapping[str, int],
    threshold: int = DEFAULT_MISSES,
) -> OrphanVerdict:
    """Decide from one consistent snapshot which units the broker has lost.

    A unit is present when its current message id is in a queue list or in
    ``unacked``, or its key is in the parking lot. A present unit's miss count
    returns to 0; an absent one's grows by one, and at ``threshold`` it is an orphan.
    """
    if threshold < 1:
        raise ConfigurationError(f"threshold must be >= 1, got {threshold!r}")
    orphans, counts = [], {}
    for unit in units:
        if unit.task_id in present_task_ids or unit.key in parked_keys:
            continue
        count = int(misses.get(unit.key, 0)) + 1
        if count >= threshold:
            orphans.append(unit)
        else:
            counts[unit.key] = count
    return OrphanVerdict(orphans, counts)


#: The message header that carries a unit's ``s0`` (see :mod:`tidegate.load.outstanding`).
SEQ_HEADER = "tidegate_seq"
#: The header that tells the publish confirm which list (lane) the message went to.
LANE_HEADER = "tidegate_lane"


class IndexEntry(NamedTuple):
    """Where the sweep's index has a unit: ``published`` under its ``s0`` (push not
    confirmed) or ``pushed`` under its ``s1``."""

    stage: Literal["published", "pushed"]
    seq: int
