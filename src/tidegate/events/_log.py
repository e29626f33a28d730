"""The JSON logger as an event subscriber: one log line per decision, as before.

It renders an event through structlog at the event's level under its old ``component``,
with the event's fields as keys, so the line is the one the plain log call wrote and the
processor chain (level filter, timestamp, :class:`~tidegate.logging.RedactSensitive`)
still applies. The level filter now only decides what the log shows.
"""

from __future__ import annotations

from typing import Any

import structlog

from tidegate.events._base import Event

__all__ = ["LogSubscriber"]


class LogSubscriber:
    """Write each event as a structlog event (lazy loggers, so ``configure()`` or
    ``capture_logs()`` called later still apply)."""

    __slots__ = ("_loggers",)

    def __init__(self) -> None:
        self._loggers: dict[str, Any] = {}

    def __call__(self, event: Event) -> None:
        logger = self._loggers.get(event.COMPONENT)
        if logger is None:
            logger = self._loggers[event.COMPONENT] = structlog.get_logger(
                component=event.COMPONENT
            )
        getattr(logger, event.LEVEL)(event.event, **event.log_fields())
