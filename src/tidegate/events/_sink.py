"""One sink, many subscribers: where every decision event goes.

The process-wide default sink starts with the JSON logger subscribed; the fleet-wide
counters (:func:`tidegate.ops.metrics.install_event_counters`) and a test's
:func:`capture_events` subscribe beside it. Emission does not depend on any subscriber:
one that raises is counted and logged once, and the others and the caller carry on,
because a broken metric must never stop a delivery.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import structlog

from tidegate.events._base import Event
from tidegate.events._log import LogSubscriber

__all__ = [
    "EventSink",
    "Subscriber",
    "capture_events",
    "emit",
    "reset_defaults",
    "sink",
]

#: Anything called with each emitted event; its return value is ignored.
Subscriber = Callable[[Event], object]


class EventSink:
    """Fan each emitted event out to the subscribers, in subscription order.

    The subscriber list is copied on write, so :meth:`emit` (the hot path, called from
    many threads) reads it without a lock and a subscriber may unsubscribe itself.

    Attributes:
        failures: how many times a subscriber raised (each failure, not each subscriber).
    """

    __slots__ = ("_failed", "_lock", "_subscribers", "failures")

    def __init__(self) -> None:
        self._subscribers: tuple[Subscriber, ...] = ()
        self._lock = threading.Lock()
        self._failed: set[int] = set()
        self.failures = 0

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        return self._subscribers

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add ``subscriber``; returns the function that removes it again (idempotent)."""
        with self._lock:
            self._subscribers = (*self._subscribers, subscriber)

        def unsubscribe() -> None:
            with self._lock:
                kept = list(self._subscribers)
                if subscriber in kept:
                    kept.remove(subscriber)
                self._subscribers = tuple(kept)

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Give ``event`` to every subscriber; never raises for a subscriber's failure."""
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception as exc:
                self._failed_once(subscriber, event, exc)

    def _failed_once(self, subscriber: Subscriber, event: Event, exc: Exception) -> None:
        with self._lock:
            self.failures += 1
            first = id(subscriber) not in self._failed
            self._failed.add(id(subscriber))
        if first:
            # Logged straight through structlog, not emitted: a failing log subscriber
            # must not recurse into itself.
            with contextlib.suppress(Exception):  # the log itself may be what fails
                structlog.get_logger(component="tidegate.events").error(
                    "event_subscriber_failed",
                    subscriber=getattr(subscriber, "__qualname__", type(subscriber).__qualname__),
                    failed_event=event.event,
                    error=type(exc).__name__,
                )


_default = EventSink()
_default.subscribe(LogSubscriber())


def sink() -> EventSink:
    """The process-wide default sink that library code emits to."""
    return _default


def emit(event: Event) -> None:
    """Emit ``event`` to the default sink."""
    _default.emit(event)


def reset_defaults() -> None:
    """Leave the default sink with only the JSON logger (tests call it between tests)."""
    global _default  # noqa: PLW0603 - the one process-wide sink is the point
    fresh = EventSink()
    fresh.subscribe(LogSubscriber())
    _default = fresh


@contextlib.contextmanager
def capture_events() -> Iterator[list[Event]]:
    """Collect every event emitted to the default sink inside the block, in order.

    The test twin of ``structlog.testing.capture_logs``: assertions read typed fields
    instead of a rendered line, and the log level plays no part.
    """
    captured: list[Event] = []
    unsubscribe = sink().subscribe(captured.append)
    try:
        yield captured
    finally:
        unsubscribe()
