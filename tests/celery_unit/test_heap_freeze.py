"""A ready worker's start-up heap is frozen out of the garbage collector (issue #18).

Celery's prefork pool collects the main process's whole heap before every fork of a
pool child; with ``max_tasks_per_child`` and half-millisecond tasks that is a fork
every second or so. ``setup``'s ``worker_ready`` hook freezes what exists by then
(:mod:`tidegate.integrations.celery.heap`). Run in a fresh interpreter: freezing is
process-wide and would keep this test run's own objects forever.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import gc
    from celery import Celery, signals
    from tidegate.integrations.celery import setup

    app = Celery("heap-freeze", broker="redis://127.0.0.1:1/0", set_as_current=False)
    setup(app, mover=False)
    before = gc.get_freeze_count()
    signals.worker_ready.send(sender=object())  # a consumer without an event loop
    after = gc.get_freeze_count()
    young = sum(gc.get_count())
    print(before, after, young, gc.collect())
    """
)


def test_a_ready_worker_freezes_its_start_up_heap() -> None:
    """Nothing is frozen before the worker is ready; afterwards the whole start-up heap
    (Celery, kombu, the app: tens of thousands of objects) is, and a collection — what
    Celery runs before each fork — finds nothing of it left to walk or free."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    before, after, young, collected = (int(v) for v in out)
    assert before == 0
    assert after > 20_000
    assert young < 1_000
    assert collected == 0
