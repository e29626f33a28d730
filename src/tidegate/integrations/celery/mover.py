"""Republishes parked messages when they are due.

One mover thread runs in each worker's main process (started on ``worker_ready``);
claims are atomic, so several movers across the fleet never republish a message twice
between them, and a mover that dies mid-way loses nothing (the claim lease expires and
another mover takes it). It sleeps until the next message is due (at most
``interval_s``), so an idle fleet costs one cheap Redis call per interval.

The same thread runs the fleet's orphan sweep (:mod:`tidegate.integrations.celery.sweep`)
when it is given one: every ``sweep.interval_s``, one worker of the fleet takes the turn.
"""

from __future__ import annotations

import threading

from celery import Celery

from tidegate.errors import BackendError
from tidegate.integrations.celery.gated import ATTEMPT_HEADER, FIRST_FAILED_HEADER, REPLAY_HEADER
from tidegate.integrations.celery.sweep import OrphanSweep
from tidegate.load.protocols import ParkingStore
from tidegate.logging import get_logger

__all__ = ["ParkingMover"]

log = get_logger("tidegate.celery")


class ParkingMover:
    """Moves due parked messages back onto their queues.

    Args:
        app: the Celery app used to publish.
        lot: where the parked messages are.
        interval_s: longest sleep between two looks.
        batch: most messages moved per look.
        sweep: the orphan sweep to run from this thread, if any.
    """

    def __init__(
        self,
        app: Celery,
        lot: ParkingStore,
        *,
        interval_s: float = 0.25,
        batch: int = 200,
        sweep: OrphanSweep | None = None,
    ) -> None:
        self.app = app
        self.lot = lot
        self.sweep = sweep
        self.interval_s = interval_s
        self.batch = batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def move_once(self) -> int:
        """Republish what is due now; returns how many messages were moved."""
        moved = 0
        for message in self.lot.claim_due(self.batch):
            env = message.envelope
            self.app.send_task(
                env["task"],
                args=env.get("args", []),
                kwargs=env.get("kwargs", {}),
                queue=env.get("queue"),
                # Nobody reads a moved unit's result; with a Redis result backend, asking
                # for it would subscribe this process to one more channel per message.
                ignore_result=True,
                headers={
                    ATTEMPT_HEADER: int(env.get("attempt", 0)),
                    REPLAY_HEADER: int(env.get("replay", 0)),
                    **(
                        {FIRST_FAILED_HEADER: float(env["first_failed_at"])}
                        if env.get("first_failed_at") is not None
                        else {}
                    ),
                },
            )
            self.lot.ack(message.id)
            moved += 1
        if moved:
            log.info("parked_messages_moved", messages=moved)
        return moved

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                moved = self.move_once()
                if self.sweep is not None:
                    self.sweep.maybe_sweep()  # beats even while the lot is busy
                if moved >= self.batch:
                    continue
                due_in = self.lot.next_due_in_s()
            except BackendError:
                log.warning("parking_mover_backend_error")
                due_in = None
            except Exception as exc:  # a broker error must not end the thread silently
                log.error("parking_mover_error", error=type(exc).__name__)
                due_in = None
            wait = self.interval_s if due_in is None else min(self.interval_s, due_in)
            self._stop.wait(max(0.01, wait))

    def start(self) -> ParkingMover:
        """Run in a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="tidegate-mover", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; a clean stop retires this worker from the sweep's roll."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.sweep is not None:
            try:
                self.sweep.retire()
            except BackendError:
                log.warning("worker_retire_failed")
