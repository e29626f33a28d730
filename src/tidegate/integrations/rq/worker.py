"""The RQ worker for tidegate's queues: JSON jobs only, a planted pickle never runs.

    rq worker-pool edi.customs --num-workers 2 --url "$TIDEGATE_REDIS_URL" \\
        --worker-class tidegate.integrations.rq.JsonWorker \\
        --exception-handler tidegate.integrations.rq.dead_letter_handler

Whatever ``--serializer`` says (RQ's CLI always passes one, pickle by default), the
worker reads jobs with :class:`~tidegate.integrations.rq.JsonSerializer`. A job whose
data is not JSON is decided on in the worker's main process, before a work horse is
forked: it is dead-lettered with a typed reason (``ContentRefused``), reported as one
``rq_job_refused`` event and failed in RQ's ``FailedJobRegistry`` — its bytes are
never handed to pickle, its function never imported or called.

A job whose work horse was killed mid-job (SIGKILL, the OOM killer), or that a killed
worker had popped but not started, is run again as a redelivery — one RQ retry, marked so
that the lifecycle asks the downstream before sending — instead of failing into RQ's
registry, where tidegate would not see it.

The worker also logs tidegate's events as JSON lines (``TIDEGATE_LOG_LEVEL``) and
turns off RQ's job-description logging: a description is the call with its
arguments, that is, the payload.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from rq.job import Job
from rq.queue import Queue
from rq.worker import Worker

from tidegate.errors import BackendError
from tidegate.integrations.rq._runtime import client_for_job
from tidegate.integrations.rq._serializer import ContentRefused, JsonSerializer, refusal
from tidegate.integrations.rq.dlq import dead_letter_refused, redeliver
from tidegate.integrations.rq.maintenance import PromptMaintenance
from tidegate.load.ledger import witness_server
from tidegate.logging import configure

__all__ = ["JsonJobs", "JsonWorker"]

#: How RQ's intermediate-queue cleanup fails a job a dead worker had popped, not started.
_STUCK = "Job was stuck in intermediate queue"


class JsonJobs(PromptMaintenance):
    """What every tidegate RQ worker class shares (a mixin before RQ's class): JSON
    jobs only, a popped job of a dead worker given back as a redelivery, and RQ's
    recovery run on time (:class:`~tidegate.integrations.rq.maintenance.PromptMaintenance`).

    Takes RQ's ``Worker`` arguments; ``serializer`` and ``log_job_description`` are
    overridden.
    """

    connection: Any
    serializer: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        configure(level=os.environ.get("TIDEGATE_LOG_LEVEL", "INFO"))
        kwargs["serializer"] = JsonSerializer
        kwargs["log_job_description"] = False
        super().__init__(*args, **kwargs)
        # RQ's CLI builds the queues with its own serializer (pickle unless told), and
        # RQ's recovery reads a dead worker's job through the queue's: the abandoned-job
        # cleanup and the intermediate-queue cleanup. Left so, a JSON job comes back
        # unreadable there and is refused (dead-lettered under its RQ job id, failed in
        # RQ): the unit is lost — and a planted pickle would be unpickled.
        for queue in self.queues:
            queue.serializer = self.serializer

    def execute_job(self, job: Job, queue: Queue) -> None:
        refused = refusal(job)
        if refused is None:
            super().execute_job(job, queue)  # type: ignore[misc]
            return
        self.refuse(job, queue, refused)

    def handle_job_failure(
        self,
        job: Job,
        queue: Queue,
        started_job_registry: Any = None,
        exc_string: str = "",
        execution: Any = None,
    ) -> None:
        """RQ fails a job that a dead worker had popped but not started (its
        intermediate-queue cleanup): make it a retried redelivery instead."""
        if exc_string.startswith(_STUCK) and refusal(job) is None:
            redeliver(job, cause="popped_by_dead_worker")
        super().handle_job_failure(  # type: ignore[misc]
            job,
            queue,
            started_job_registry=started_job_registry,
            exc_string=exc_string,
            execution=execution,
        )

    def refuse(self, job: Job, queue: Queue, refused: ContentRefused) -> None:
        """Dead-letter, report and fail ``job`` without running it.

        RQ's own failure bookkeeping runs as for a job that raised, so the job leaves
        the queue's intermediate list and is visible in the ``FailedJobRegistry`` —
        never retried, whatever ``Retry`` it was enqueued with.
        """
        with self.connection.pipeline() as pipe:
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)
            pipe.execute()
        dead_letter_refused(job, refused, self.connection)
        job.retries_left = None  # an RQ retry would only refuse it again
        self.handle_job_failure(
            job, queue, exc_string=f"{type(refused).__name__}: {refused.problem}"
        )


class JsonWorker(JsonJobs, Worker):
    """An ``rq.Worker`` (a work horse forked per job) that takes JSON jobs only (see
    the module docstring)."""

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        """Read which Redis server tidegate's store is on, then fork: the work horse's
        delivery ledger starts from it (:func:`~tidegate.load.ledger.witness_server`),
        so a restart that lost the record of the server before is still seen as one."""
        # Best effort: an unreachable Redis fails the horse's own first read anyway,
        # where the lifecycle judges it.
        with contextlib.suppress(BackendError):
            witness_server(client_for_job(self.connection))
        super().fork_work_horse(job, queue)

    def handle_work_horse_killed(self, job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
        """The work horse died under the job: RQ fails (or retries) the job right after
        this; make it a retried redelivery, reconciled before it is sent again."""
        if refusal(job) is None:
            redeliver(job, cause="work_horse_killed")
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)  # type: ignore[no-untyped-call]
