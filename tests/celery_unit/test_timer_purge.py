"""Finished tasks' time-limit timers leave a worker's event loop when purged."""

from __future__ import annotations

import heapq
import types

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
