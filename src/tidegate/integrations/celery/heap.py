"""Keep a prefork worker's start-up heap out of the cyclic garbage collector.

A worker's main process builds everything it will ever need before it takes its first
task (Celery, kombu, the app, tidegate's runtime: a few hundred thousand objects), and
keeps all of it for its whole life. Two things walk that heap again and again anyway:

- **every fork.** Celery's prefork pool runs a full ``gc.collect()`` in the main process
  before it forks each new child (``AsynPool._create_worker_process``, Celery #2927). With
  ``max_tasks_per_child`` a bulk pool whose parse tasks take half a millisecond
  replaces a child every second or so; at 100,000 B/Ls that collection was about 6 % of
  the main process's samples (py-spy), in the one process that hands every task to the
  pool and so sets the parse step's pace (issue #18).
- **a child's first full collection.** It writes to the header of every object it
  inherited, which copies most of the heap's pages out of the parent's (copy-on-write)
  — CPU in every recycled child, and memory.

:func:`freeze_startup_heap` moves what exists once the worker is ready into the
interpreter's permanent generation (``gc.freeze``), after one last collection; children
forked afterwards inherit it as frozen. What the worker allocates later is collected as
before. The price is that garbage cycles left over from start-up are never freed, which
is bounded by the start-up itself.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]


def freeze_startup_heap() -> int:
    """Collect, then freeze every object now tracked by the collector; returns how many
    objects are frozen in all (call in the worker's main process once it is ready)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
