"""Decisions of the adaptive controller: the learned rate or concurrency moved.

The controller also keeps these fields in its decision history (``tidegate gate
history``), so the event's fields are that record's keys plus ``downstream``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tidegate.events._base import Event, Level

__all__ = ["ConcurrencyChanged", "RateChanged", "RateStaleRejection"]


@dataclass(frozen=True, slots=True)
class RateChanged(Event):
    """The fleet's learned rate (or its ceiling, or a quota pause) changed."""

    EVENT: ClassVar[str] = "adaptive_rate_changed"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.adaptive"

    downstream: str
    kind: str
    at_ms: float
    reason: str
    rate: float
    previous_rate: float
    ceiling: float | None
    previous_ceiling: float | None
    pause_s: float | None


@dataclass(frozen=True, slots=True)
class RateStaleRejection(Event):
    """429s or 503s arrived to calls admitted before the last cut: counted, but the rate
    does not move."""

    EVENT: ClassVar[str] = "adaptive_rate_stale_rejection"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.adaptive"

    downstream: str
    kind: str
    at_ms: float
    reason: str
    rate: float
    previous_rate: float
    ceiling: float | None
    previous_ceiling: float | None
    pause_s: float | None
    throttled: int
    unavailable: int


@dataclass(frozen=True, slots=True)
class ConcurrencyChanged(Event):
    """The fleet's learned concurrency limit changed."""

    EVENT: ClassVar[str] = "adaptive_concurrency_changed"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.adaptive"

    downstream: str
    kind: str
    at_ms: float
    reason: str
    concurrency: int
    previous_concurrency: int
    limit: float
    gradient: float | None
    min_latency_ms: float | None
