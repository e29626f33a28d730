"""Celery integration: the safe preset, gated tasks, and the parking mover.

    app = Celery("port", broker="redis://...")
    tidegate.integrations.celery.setup(app)

``setup`` applies :func:`configure` (prefetch 1, acks_late, JSON only, queues, the
visibility-timeout check) and installs worker hooks: the check again at worker start
(a misconfigured worker refuses to start), the discard guard (a message Celery would drop
and log whole is dead-lettered instead, see :mod:`tidegate.integrations.celery.discards`),
a Redis broker whose refused writes (OOM, READONLY) wait instead of killing the worker
(:mod:`tidegate.integrations.celery.broker`), publish tracking for the app's gated tasks,
a purge of finished tasks' time-limit timers in each worker's event loop (they would
otherwise hold every task of the last soft-limit window), the start-up heap frozen out
of the garbage collector once the worker is ready (Celery collects before every fork of
a pool child, see :mod:`tidegate.integrations.celery.heap`), and a :class:`ParkingMover`
in each worker's main process that also runs the orphan sweep (a Redis broker can lose
a message when a worker main process dies between ``BRPOP`` and its ``unacked`` write;
see :mod:`tidegate.integrations.celery.sweep`), and the main process's read of tidegate's
Redis server once ready, which pool children forked later (``max_tasks_per_child``)
start their delivery ledgers from (:func:`tidegate.load.ledger.witness_server`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from celery import Celery, signals

from tidegate.errors import BackendError
from tidegate.integrations.celery.amqp_worker import install_amqp_hooks
from tidegate.integrations.celery.broker import install_write_tolerant_broker
from tidegate.integrations.celery.discards import DiscardGuard, install_discard_guard
from tidegate.integrations.celery.gated import ATTEMPT_HEADER, GatedTask
from tidegate.integrations.celery.heap import freeze_startup_heap
from tidegate.integrations.celery.mover import ParkingMover
from tidegate.integrations.celery.preset import (
    DEFAULT_QUEUES,
    DEFAULT_ROUTES,
    CeleryPreset,
    check_visibility_timeout,
    configure,
)
from tidegate.integrations.celery.runtime import runtime
from tidegate.integrations.celery.sweep import OrphanSweep, track_publishes
from tidegate.integrations.celery.timers import install_timer_purge
from tidegate.load.ledger import witness_server

__all__ = [
    "ATTEMPT_HEADER",
    "DEFAULT_QUEUES",
    "DEFAULT_ROUTES",
    "CeleryPreset",
    "DiscardGuard",
    "GatedTask",
    "OrphanSweep",
    "ParkingMover",
    "check_visibility_timeout",
    "configure",
    "install_discard_guard",
    "install_write_tolerant_broker",
    "setup",
    "track_publishes",
]

_MOVERS: dict[int, ParkingMover] = {}


def setup(app: Celery, preset: CeleryPreset | None = None, *, mover: bool = True) -> Celery:
    """Configure ``app`` and install tidegate's worker hooks; returns ``app``."""
    configure(app, preset)
    install_discard_guard(app)
    install_write_tolerant_broker(app)
    install_amqp_hooks(app)  # RabbitMQ only: drain the broker's dead letters into the DLQ

    def _check(sender: Any = None, **_: Any) -> None:
        check_visibility_timeout(app)

    def _start_mover(sender: Any = None, **_: Any) -> None:
        # The main process must not hold finished tasks' time-limit timers (issue: worker
        # memory growing with the burst); see tidegate.integrations.celery.timers.
        install_timer_purge(sender)
        # Celery collects the whole heap before every fork of a pool child: keep the
        # start-up heap out of it (tidegate.integrations.celery.heap).
        freeze_startup_heap()
        if mover and id(app) not in _MOVERS:
            rt = runtime(app)
            sweep = OrphanSweep.for_app(
                app,
                rt.outstanding,
                ledger=rt.ledger,
                parking=rt.parking,
                interval_s=rt.settings.sweep_interval_s,
            )
            _MOVERS[id(app)] = ParkingMover(app, rt.parking, sweep=sweep).start()

    def _witness(sender: Any = None, **_: Any) -> None:
        # A pool child recycled after a Redis restart that lost the record of the server
        # before would know of no server before it; children forked from now on start
        # from the one read here. Best effort: a child meets an unreachable Redis itself.
        with contextlib.suppress(BackendError):
            witness_server(runtime(app).client)

    def _track(sender: Any = None, **_: Any) -> None:
        # In every worker process (main and pool children): what the workers publish
        # (an aggregate's forwards, the mover's republishes) is tracked too.
        track_publishes(None, runtime(app).outstanding, app=app)

    def _stop_mover(sender: Any = None, **_: Any) -> None:
        running = _MOVERS.pop(id(app), None)
        if running is not None:
            running.stop()

    signals.worker_init.connect(_check, weak=False)
    signals.worker_ready.connect(_witness, weak=False)
    signals.worker_ready.connect(_start_mover, weak=False)
    signals.worker_init.connect(_track, weak=False)
    signals.worker_shutdown.connect(_stop_mover, weak=False)
    return app
