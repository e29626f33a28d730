"""The shape every decision event shares.

A decision is a value first and a log line second: its class says which decision it is,
its fields say what was decided, and its ``EVENT`` name and ``LEVEL`` are the log
contract (dashboards, the README and tests read those lines, so the names are the ones
the plain log calls used before events were typed). Subscribers receive the value, so a
counter never has to parse a log line and a log level never hides a decision from one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal

__all__ = ["Event", "Level"]

#: A structlog method name: the level the JSON logger renders the event at.
Level = Literal["debug", "info", "warning", "error"]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of the typed decision events.

    Subclasses are frozen, slotted dataclasses whose fields are the log line's keys, in
    the order they appear on it. A field declared with ``metadata={"log": False}`` steers
    the event (for instance its name) without being logged.
    """

    #: The stable log event name (snake_case).
    EVENT: ClassVar[str]
    #: The level the JSON logger renders it at.
    LEVEL: ClassVar[Level] = "info"
    #: The ``component`` of the logger that used to emit it.
    COMPONENT: ClassVar[str] = "tidegate"

    @property
    def event(self) -> str:
        """The log event name; a class whose name depends on a field overrides this."""
        return self.EVENT

    def log_fields(self) -> dict[str, Any]:
        """The log line's keys and values, in field order, without the unlogged ones."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("log", True)}
