"""Decisions about a queue's load: shed to quarantine, replay, shedding, scale signal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from tidegate.events._base import Event, Level

__all__ = ["DocumentShed", "QuarantineReplayed", "ScaleSignal", "SheddingChanged"]


@dataclass(frozen=True, slots=True)
class DocumentShed(Event):
    """A document was quarantined instead of queued (``duplicate``: it already was)."""

    EVENT: ClassVar[str] = "document_shed"
    COMPONENT: ClassVar[str] = "tidegate.load"

    key_hash: str
    document_class: str
    queue: str
    reason: str
    depth: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class QuarantineReplayed(Event):
    """Quarantined documents of ``queue`` were given back to the intake."""

    EVENT: ClassVar[str] = "quarantine_replayed"
    COMPONENT: ClassVar[str] = "tidegate.load"

    queue: str
    documents: int
    released: int
    skipped_in_replay: int
    by_class: Mapping[str, int]
    forced: bool


@dataclass(frozen=True, slots=True)
class ScaleSignal(Event):
    """The monitor's scaling signal for ``queue`` changed (or its reason did)."""

    EVENT: ClassVar[str] = "scaling_signal_changed"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.monitor"

    queue: str
    signal: str
    previous: str
    reason: str
    depth: int
    desired_workers: int


@dataclass(frozen=True, slots=True)
class SheddingChanged(Event):
    """Shedding of ``queue`` started or stopped (``started``, not logged, names it)."""

    EVENT: ClassVar[str] = "shedding_started"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.monitor"

    queue: str
    depth: int
    over_hwm_intervals: int
    hwm: int
    lwm: int
    started: bool = field(default=True, metadata={"log": False})

    @property
    def event(self) -> str:
        return "shedding_started" if self.started else "shedding_stopped"
