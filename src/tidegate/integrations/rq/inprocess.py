"""An RQ worker that runs tidegate's jobs in its own process: no work horse per job.

    rq worker edi.customs --url "$TIDEGATE_REDIS_URL" \\
        --worker-class tidegate.integrations.rq.InProcessJsonWorker \\
        --exception-handler tidegate.integrations.rq.dead_letter_handler

RQ's default ``Worker`` forks a work horse for every job, and a horse starts cold:
its own Redis connection, its gate objects, its HTTP client to the downstream — per
job. A gated job is one short HTTP call whose pace the fleet-wide gate sets, so the
fork is most of what a job costs. This worker runs the job in the worker process
(RQ's ``SimpleWorker`` semantics) and keeps those clients from one job to the next.

Why that is safe for tidegate: the lifecycle already treats any death mid-job as
possible (ledger ``sending``, reconcile by lookup), so the one thing the fork gave —
a job that dies alone while its worker survives and retries it at once — becomes a
whole-worker kill, recovered by RQ's abandoned-job path (see
:mod:`tidegate.integrations.rq.dlq`). To keep that path as quick as with a work
horse, a thread beats the execution's heartbeat every ``--job-monitoring-interval``
while the job runs (RQ's ``SimpleWorker`` beats none and so declares a job abandoned
only ``job_timeout`` + 60 s after it started). The trade-offs: a job that leaks
memory or wedges the interpreter takes the worker with it (a stuck job is still
ended by RQ's ``job_timeout``, in-process by ``SIGALRM``); a crash costs the
heartbeat TTL (``--job-monitoring-interval`` + 60 s) instead of nothing before the
job comes back; and job code must not leave process-wide state behind.
"""

from __future__ import annotations

import threading

from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.worker import SimpleWorker
from rq.worker.base import BaseWorker

from tidegate.integrations.rq.worker import JsonJobs
from tidegate.logging import get_logger

__all__ = ["InProcessJsonWorker"]

log = get_logger("tidegate.rq")


class InProcessJsonWorker(JsonJobs, SimpleWorker):
    """A JSON-only RQ worker that runs each job in its own process (module docstring).

    Takes RQ's ``Worker`` arguments.
    """

    #: RQ's forking worker's heartbeat TTL: ``--job-monitoring-interval`` + 60 s.
    get_heartbeat_ttl = BaseWorker.get_heartbeat_ttl

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        """Run the job here, beating its heartbeat from a thread until it ends."""
        done = threading.Event()
        beat = threading.Thread(
            target=self._beat, args=(job, execution, done), name="rq-heartbeat", daemon=True
        )
        beat.start()
        try:
            return bool(super().perform_job(job, queue, execution))
        finally:
            done.set()
            beat.join()

    def _beat(self, job: Job, execution: Execution, done: threading.Event) -> None:
        while not done.wait(self.job_monitoring_interval):
            try:
                self.maintain_heartbeats(job, execution)
            except Exception as exc:  # the next beat may get through
                log.warning("rq_heartbeat_failed", job_id=job.id, error=type(exc).__name__)
