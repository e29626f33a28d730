"""Stop points for the kill-window tests: a worker or a job that parks itself at one
moment of a job's life, says so in Redis, and waits there to be SIGKILLed.

Imported by real ``rq worker`` processes (this directory is on their PYTHONPATH).
``TIDEGATE_TEST_STOP_AT`` names the moment; ``TIDEGATE_PREFIX`` namespaces the
marker ``<prefix>:stopped:<job id>`` that the test waits for. A job stops once: a
marker already there means this is the recovery, which runs through.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from rq.job import Job, get_current_job
from rq.queue import Queue
from rq_jobs import lodge  # type: ignore[import-not-found]

from tidegate.integrations.rq import JsonWorker, gated

_STOP_AT = os.environ.get("TIDEGATE_TEST_STOP_AT", "")


def _stop_here(connection: redis.Redis, job_id: str, moment: str) -> None:
    """Mark ``moment`` for ``job_id`` (first time only) and block until killed."""
    marker = f"{os.environ['TIDEGATE_PREFIX']}:stopped:{job_id}"
    if connection.set(marker, moment, nx=True):
        threading.Event().wait()  # until SIGKILL: the test kills the whole worker here


class StoppingWorker(JsonWorker):
    """A ``JsonWorker`` that stops (``popped``) after RQ's BLMOVE moved the job to the
    intermediate list, before anything is recorded of its execution; or
    (``execution_prepared``) after the execution is in the ``StartedJobRegistry``,
    before the work horse marks the job started; or (``maintenance``) at the end of
    its first maintenance pass, still holding the queue's maintenance lock."""

    def clean_registries(self) -> None:
        if _STOP_AT == "maintenance":
            for queue in self.queues:
                queue.release_maintenance_lock = lambda: _stop_here(  # type: ignore[method-assign]
                    self.connection, "maintenance", _STOP_AT
                )
        super().clean_registries()

    def execute_job(self, job: Job, queue: Queue) -> None:
        if _STOP_AT == "popped":
            _stop_here(self.connection, job.id, _STOP_AT)
        super().execute_job(job, queue)

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        if _STOP_AT == "execution_prepared":
            _stop_here(self.connection, job.id, _STOP_AT)
        super().fork_work_horse(job, queue)


@gated("customs", max_wait_s=5, lookup_path="/declarations")
def lodge_then_stop(envelope: dict[str, Any]) -> dict[str, Any]:
    """Lodge with the customs sim; then (``accepted``) stop before the lifecycle marks
    the unit delivered — the downstream has it, the ledger says ``sending``."""
    answer: dict[str, Any] = lodge.__wrapped__(envelope)
    job = get_current_job()
    if _STOP_AT == "accepted" and job is not None:
        _stop_here(job.connection, job.id, _STOP_AT)
    return answer
