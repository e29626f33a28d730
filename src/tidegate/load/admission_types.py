"""What goes into an admission and what comes out: the document offered, where it went,
what a replay did, and the broker side (:class:`Sender`). Values only; the decision is
:mod:`tidegate.load.admission`, which re-exports all of them.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tidegate.edi.classify import DocumentClass

__all__ = ["Admitted", "Inbound", "Outcome", "ReplayReport", "Sender"]


class Outcome(enum.Enum):
    """Where a submitted document went."""

    QUEUED = "queued"
    QUARANTINED = "quarantined"


@dataclass(frozen=True, slots=True)
class Inbound:
    """A document offered to the intake.

    Args:
        key: its idempotency key (stable across re-sends).
        document_class: its class, hence its queue and whether it may be shed.
        payload: the task's single argument (JSON-serialisable); never logged.
    """

    key: str
    document_class: DocumentClass
    payload: Mapping[str, Any]

    @property
    def queue(self) -> str:
        return self.document_class.queue


@dataclass(frozen=True, slots=True)
class Admitted:
    """What :meth:`~tidegate.load.admission.Admission.submit` did with one document.

    Attributes:
        outcome: queued or quarantined.
        key / document_class / queue: the document.
        reason: ``admitted``, ``wait_expired`` (queued after the bounded wait),
            ``sustained_overload`` (quarantined) …
        depth: the queue depth the decision saw (``None`` if nothing was sampled).
        waited_s: how long the producer was blocked.
    """

    outcome: Outcome
    key: str
    document_class: str
    queue: str
    reason: str
    depth: int | None = None
    waited_s: float = 0.0

    @property
    def queued(self) -> bool:
        return self.outcome is Outcome.QUEUED

    @property
    def quarantined(self) -> bool:
        return self.outcome is Outcome.QUARANTINED


@dataclass
class ReplayReport:
    """What one :meth:`~tidegate.load.admission.Admission.replay` did (``skipped``: held
    by another replay)."""

    queue: str
    replayed: int = 0
    released: int = 0
    skipped: int = 0
    by_class: Counter[str] = field(default_factory=Counter)


@runtime_checkable
class Sender(Protocol):
    """Puts one document on the broker."""

    #: ``"celery"`` or ``"rq"``; stored with quarantined documents.
    name: str

    def send(self, queue: str, task: str, payload: Mapping[str, Any]) -> None: ...
