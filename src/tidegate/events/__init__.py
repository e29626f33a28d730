"""Decisions as typed events, one sink, many subscribers (issue #12, item 8).

Library code does ``emit(GateThrottled(...))`` where it used to write a log line. The
default sink hands the event to its subscribers: the JSON logger (the same line as
before), the fleet-wide Redis counters once a worker installed them, and a test's
:func:`capture_events`. So a log level filters only what the log shows and can never
change a metric. Sans-I/O and import-light: dataclasses and structlog only.
"""

from __future__ import annotations

from tidegate.events._base import Event, Level
from tidegate.events._log import LogSubscriber
from tidegate.events._sink import (
    EventSink,
    Subscriber,
    capture_events,
    emit,
    reset_defaults,
    sink,
)
from tidegate.events.adaptive import ConcurrencyChanged, RateChanged, RateStaleRejection
from tidegate.events.gate import (
    DownstreamAnswered429,
    GatePaused,
    GatePausedAfterReserve,
    GatePauseWaited,
    GateResumed,
    GateThrottled,
)
from tidegate.events.intake import IntakeFolderPaused, IntakeFolderResumed
from tidegate.events.load import (
    DocumentShed,
    QuarantineReplayed,
    ScaleSignal,
    SheddingChanged,
)
from tidegate.events.units import (
    JobParked,
    LetterReplayed,
    LetterReplaySkipped,
    LetterResolved,
    MessageParked,
    UnitDeadLettered,
)

__all__ = [
    "ConcurrencyChanged",
    "DocumentShed",
    "DownstreamAnswered429",
    "Event",
    "EventSink",
    "GatePauseWaited",
    "GatePaused",
    "GatePausedAfterReserve",
    "GateResumed",
    "GateThrottled",
    "IntakeFolderPaused",
    "IntakeFolderResumed",
    "JobParked",
    "LetterReplaySkipped",
    "LetterReplayed",
    "LetterResolved",
    "Level",
    "LogSubscriber",
    "MessageParked",
    "QuarantineReplayed",
    "RateChanged",
    "RateStaleRejection",
    "ScaleSignal",
    "SheddingChanged",
    "Subscriber",
    "UnitDeadLettered",
    "capture_events",
    "emit",
    "reset_defaults",
    "sink",
]
