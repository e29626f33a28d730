"""Free the time-limit timers of finished tasks in a prefork worker's main process.

Celery's prefork pool starts a soft (or hard) time-limit timer for every task it hands
to a child (``AsynPool.on_timeout_set``) and cancels it when the task ends. kombu's
timer only *marks* a cancelled entry: it stays in the heap, holding the entry, its
arguments and a weak-value map slot, until its due time. With tidegate's preset (soft
limit 240 s) a worker main process therefore holds every task it ran in the last four
minutes — measured at about 0.45 KiB per task, 4 MiB per 10,000 tasks — and every pool
child forked in that window inherits the grown heap. Memory then grows with throughput
and run length instead of staying flat, which is the promise of prefetch 1.

:func:`install_timer_purge` schedules :func:`purge_cancelled` on the worker's own event
loop, so the heap is rebuilt in the loop's thread (no lock needed) every
:data:`DEFAULT_PURGE_INTERVAL_S`. It relies on kombu's private ``Timer._queue`` (a heap
of ``(eta, priority, entry)``); with another layout it does nothing and says so once.
"""

from __future__ import annotations

import heapq
from typing import Any

from tidegate.logging import get_logger

__all__ = ["DEFAULT_PURGE_INTERVAL_S", "install_timer_purge", "purge_cancelled"]

log = get_logger("tidegate.celery")

#: Seconds between two purges: bounds the cancelled entries to this many seconds of tasks.
#: Every second, not every 30: at the 50,000-interchange benchmark's ~230 TOS tasks a
#: second, 30 s of cancelled timers is about 3 MiB (0.45 KiB each) of the main
#: process's heap at the top of each period — a high-water mark that pymalloc keeps as
#: RSS and that every child forked afterwards inherits (issue #18). A purge walks only
#: that second's entries plus the live ones.
DEFAULT_PURGE_INTERVAL_S = 1.0


def purge_cancelled(timer: Any) -> int | None:
    """Drop cancelled entries from ``timer``'s heap, in place; returns how many, or None
    when the timer is not laid out as this kombu version's."""
    queue = getattr(timer, "_queue", None)
    if not isinstance(queue, list):
        return None
    try:
        live = [item for item in queue if not item.entry.canceled]
    except AttributeError:
        return None
    removed = len(queue) - len(live)
    if removed:
        # In place: the event loop holds a reference to this very list.
        queue[:] = live
        heapq.heapify(queue)
    return removed


def install_timer_purge(consumer: Any, *, interval_s: float = DEFAULT_PURGE_INTERVAL_S) -> bool:
    """Purge ``consumer``'s event-loop timer every ``interval_s`` (call on ``worker_ready``,
    whose sender is the consumer); False when the worker runs without an event loop."""
    hub = getattr(consumer, "hub", None)
    timer = getattr(hub, "timer", None)
    if hub is None or timer is None:
        return False
    if purge_cancelled(timer) is None:
        log.warning("timer_purge_unavailable", reason="unknown kombu timer layout")
        return False

    def purge() -> None:
        purge_cancelled(timer)

    hub.call_repeatedly(interval_s, purge)
    return True
