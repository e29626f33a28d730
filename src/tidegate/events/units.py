"""Decisions about one unit of work: park it, dead-letter it, replay its letter.

Units are named by ``key_hash`` (:func:`tidegate.logging.key_hash`), never by their key:
an idempotency key can be a B/L number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tidegate.events._base import Event, Level

__all__ = [
    "JobParked",
    "LetterReplaySkipped",
    "LetterReplayed",
    "LetterResolved",
    "MessageParked",
    "UnitDeadLettered",
]


@dataclass(frozen=True, slots=True)
class MessageParked(Event):
    """A message was set aside until ``delay_s`` from now instead of holding a worker."""

    EVENT: ClassVar[str] = "message_parked"
    COMPONENT: ClassVar[str] = "tidegate.load"

    message_id: str
    task: str | None
    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class JobParked(Event):
    """An RQ job was rescheduled ``delay_s`` from now (as ``scheduled_job_id``)."""

    EVENT: ClassVar[str] = "message_parked"
    COMPONENT: ClassVar[str] = "tidegate.rq"

    job_id: str
    scheduled_job_id: str
    task: str | None
    delay_s: float
    reason: str
    attempt: int


@dataclass(frozen=True, slots=True)
class UnitDeadLettered(Event):
    """A unit ended in the dead-letter queue, with the reason an operator acts on.

    ``bl`` (not logged) names the event ``bl_dead_lettered`` for a B/L unit of a bulk
    batch, ``task_dead_lettered`` otherwise.
    """

    EVENT: ClassVar[str] = "task_dead_lettered"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.load"

    key_hash: str
    task: str
    reason: str
    exception: str | None
    attempts: int
    batch_id: str | None
    bl: bool = field(default=False, metadata={"log": False})

    @property
    def event(self) -> str:
        return "bl_dead_lettered" if self.bl else self.EVENT


@dataclass(frozen=True, slots=True)
class LetterReplayed(Event):
    """A dead letter was published again, held against a second replay until then."""

    EVENT: ClassVar[str] = "dlq_item_replayed"
    COMPONENT: ClassVar[str] = "tidegate.load"

    key_hash: str
    task: str
    reason: str
    attempts: int
    replays: int
    in_replay_until: float | None
    batch_id: str | None


@dataclass(frozen=True, slots=True)
class LetterResolved(Event):
    """A replayed unit was delivered: its dead letter is removed."""

    EVENT: ClassVar[str] = "dlq_item_resolved"
    COMPONENT: ClassVar[str] = "tidegate.delivery"

    task: str
    downstream: str
    engine: str
    key_hash: str


@dataclass(frozen=True, slots=True)
class LetterReplaySkipped(Event):
    """A dead letter was left alone: another replay of it is still in flight."""

    EVENT: ClassVar[str] = "dlq_item_replay_skipped"
    COMPONENT: ClassVar[str] = "tidegate.load"

    key_hash: str
    task: str
    in_replay_until: float | None
