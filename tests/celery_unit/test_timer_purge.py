"""Finished tasks' time-limit timers leave a worker's event loop when purged."""

from __future__ import annotations

import heapq
import types
from typing import Any

from kombu.asynchronous.timer import Timer

from tidegate.integrations.celery.timers import install_timer_purge, purge_cancelled


def test_cancelled_entries_leave_the_heap_and_the_rest_fire_in_order() -> None:
    """60 of 100 timers cancelled (tasks that finished): 60 removed, 40 still due in order."""
    timer = Timer()
    fired: list[int] = []
    entries = [timer.call_at(1_000.0 + i, fired.append, (i,)) for i in range(100)]
    for i, entry in enumerate(entries):
        if i % 5 < 3:
            entry.cancel()
    queue = timer._queue
    assert purge_cancelled(timer) == 60
    assert timer._queue is queue  # the event loop keeps a reference to this very list
    assert len(queue) == 40
    while queue:
        timer.apply_entry(heapq.heappop(queue).entry)
    assert fired == [i for i in range(100) if i % 5 >= 3]
    assert purge_cancelled(timer) == 0


def test_an_unknown_timer_layout_is_left_alone() -> None:
    """Another kombu version's timer: nothing is touched, the caller is told."""
    assert purge_cancelled(types.SimpleNamespace(_queue=None)) is None
    assert purge_cancelled(types.SimpleNamespace(_queue=[object()])) is None


def test_install_schedules_the_purge_on_the_consumers_loop() -> None:
    """The purge runs on the worker's own hub, so it never races the event loop."""
    scheduled: list[tuple[float, object]] = []
    hub = types.SimpleNamespace(
        timer=Timer(), call_repeatedly=lambda s, fn, *a: scheduled.append((s, fn))
    )
    assert install_timer_purge(types.SimpleNamespace(hub=hub), interval_s=30.0)
    ((interval, purge),) = scheduled
    assert interval == 30.0
    entry = hub.timer.call_after(600, print)
    entry.cancel()
    purge()  # type: ignore[operator]
    assert hub.timer._queue == []
    assert not install_timer_purge(types.SimpleNamespace(hub=None))


def test_the_default_purge_keeps_at_most_a_second_of_finished_tasks() -> None:
    """At 200 tasks a second, each task's time-limit timer cancelled when it ends: with
    the default installation the heap never holds more than about one second of them
    (the 30-s period before issue #18's second pass let 6,000 pile up: megabytes of
    the main process at a benchmark's rate, inherited by every child forked then)."""
    scheduled: list[tuple[float, Any]] = []
    timer = Timer()
    hub = types.SimpleNamespace(
        timer=timer, call_repeatedly=lambda s, fn, *a: scheduled.append((s, fn))
    )
    assert install_timer_purge(types.SimpleNamespace(hub=hub))
    ((interval, purge),) = scheduled
    rate, seconds, most = 200, 60, 0
    next_purge = interval
    for i in range(rate * seconds):
        now = i / rate
        if now >= next_purge:
            purge()
            next_purge += interval
        timer.call_after(240.0, print).cancel()  # the task ended long before its limit
        most = max(most, len(timer._queue))
    assert most <= rate * 1.0 + 1, f"{most} cancelled timers held at once"
