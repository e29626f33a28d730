"""What the registry of outstanding units holds and decides, without Redis.

:class:`OutstandingUnit` (what is needed to publish a unit again), the orphan verdict
(:func:`find_orphans`: which units the broker lost, by consecutive misses) and
:class:`OutstandingStore`, the protocol the gated task, the lifecycle's driver and the
orphan sweep see. :class:`tidegate.load.outstanding.Outstanding` is the Redis store;
:class:`tidegate.load.memory.MemoryOutstanding` its one-process twin, held to the same
behaviour suite (``tests/load/stores/test_outstanding_behaviour.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from tidegate.errors import ConfigurationError

__all__ = [
    "DEFAULT_MISSES",
    "LANE_HEADER",
    "SEQ_HEADER",
    "IndexEntry",
    "OrphanVerdict",
    "OutstandingStore",
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


@runtime_checkable
class OutstandingStore(Protocol):
    """The registry of published, unsettled units and the fleet's roll of workers.

    Sequences (``s0``, ``s1``) come from the store's clock in µs, never smaller than
    the last one handed out plus one; worker ages are measured on the same clock.
    """

    def record(self, unit: OutstandingUnit) -> int:
        """Remember ``unit`` before its message is pushed; its ``s0``."""

    def pushed(self, key: str, lane: str, s0: int, *, s1: int | None = None) -> int:
        """The message recorded under ``s0`` is in ``lane``: its ``s1``, 0 if not waiting."""

    def requeued(self, key: str, task_id: str) -> int:
        """The unit's current message was pushed again: a new ``s1``, 0 if not its message."""

    def hold(self, key: str) -> None:
        """``key`` is parked: out of the index, record kept."""

    def settle(self, key: str) -> None:
        """Forget ``key``: delivered or dead-lettered."""

    def get(self, key: str) -> OutstandingUnit | None:
        """``key``'s record."""

    def indexed(self, key: str, lane: str) -> IndexEntry | None:
        """Where the sweep's index of ``lane`` has ``key``, if anywhere."""

    def __len__(self) -> int:
        """How many units are recorded."""

    def queues(self) -> list[str]:
        """Every queue a recorded unit was published to, sorted."""

    def iter_pages(self, page: int) -> Iterator[list[OutstandingUnit]]:
        """Every record, ``page`` at a time."""

    def misses_of(self, keys: list[str]) -> dict[str, int]:
        """The stored miss counts of ``keys`` (absent keys have none)."""

    def store_misses(self, verdict: OrphanVerdict, *, present: Iterable[str]) -> None:
        """Write one sweep's miss counts (present units back to 0)."""

    def beat(
        self, worker: str, *, dead_after_s: float, arm_sweeps: int, now_ms: float | None = None
    ) -> int:
        """``worker`` is alive; arm sweeps for workers silent ``dead_after_s``; how many."""

    def retire(self, worker: str) -> None:
        """``worker`` stops cleanly: its silence is no death."""

    def workers(self) -> list[str]:
        """The workers on the roll (alive, or not yet found dead), sorted."""

    def arm(self, sweeps: int) -> None:
        """Arm ``sweeps`` sweeps now."""

    def take_armed_sweep(self) -> bool:
        """Use one armed sweep; False when none is (and the miss counts are gone)."""
