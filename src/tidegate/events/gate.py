"""Decisions at a downstream's gate: throttle, pause, resume, and the downstream's 429.

Emitted by :mod:`tidegate.flow` and :mod:`tidegate.downstream`; counted by
:class:`~tidegate.ops.event_counters.EventCounters` into the fleet-wide throttle,
pause, wait and 429 series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tidegate.events._base import Event, Level

__all__ = [
    "DownstreamAnswered429",
    "GatePauseWaited",
    "GatePaused",
    "GatePausedAfterReserve",
    "GateResumed",
    "GateThrottled",
]

#: ``try``: a try-only call refused; ``reserve``: admitted after sleeping ``wait_s``;
#: ``refused``: a blocking call that would wait past its budget.
ThrottleMode = Literal["try", "reserve", "refused"]


@dataclass(frozen=True, slots=True)
class GateThrottled(Event):
    """The gate held a caller back (``reason``: ``rate``, ``paused`` or ``concurrency``)."""

    EVENT: ClassVar[str] = "downstream_gate_throttled"
    COMPONENT: ClassVar[str] = "tidegate.flow"

    downstream: str
    reason: str
    wait_s: float
    tokens_left: float
    mode: ThrottleMode


@dataclass(frozen=True, slots=True)
class GatePaused(Event):
    """A fleet-wide pause was asked for (after a 429, or by an operator).

    ``extended`` says whether it moved the pause's end (``until_ms``): a pause is never
    shortened, so a shorter one than the current leaves it and says ``False``.
    """

    EVENT: ClassVar[str] = "downstream_gate_paused"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.flow"

    downstream: str
    pause_s: float
    reason: str
    extended: bool
    until_ms: int


@dataclass(frozen=True, slots=True)
class GatePauseWaited(Event):
    """A caller found the gate paused and waits the pause out (``wait_s``)."""

    EVENT: ClassVar[str] = "downstream_gate_paused"
    COMPONENT: ClassVar[str] = "tidegate.flow"

    downstream: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class GatePausedAfterReserve(Event):
    """A pause arrived while a caller slept towards its reserved slot: the slot is dropped."""

    EVENT: ClassVar[str] = "downstream_gate_paused_after_reserve"
    COMPONENT: ClassVar[str] = "tidegate.flow"

    downstream: str
    wait_s: float
    slot_forfeited_s: float


@dataclass(frozen=True, slots=True)
class GateResumed(Event):
    """An operator lifted the pause."""

    EVENT: ClassVar[str] = "downstream_gate_resumed"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.flow"

    downstream: str


@dataclass(frozen=True, slots=True)
class DownstreamAnswered429(Event):
    """The downstream itself answered "too many requests" (``status`` 429)."""

    EVENT: ClassVar[str] = "downstream_throttled"
    LEVEL: ClassVar[Level] = "warning"
    COMPONENT: ClassVar[str] = "tidegate.downstream"

    retry_after_s: float | None
    paused: bool
    downstream: str
    path: str
    status: int
    key_hash: str
