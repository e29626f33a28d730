"""RQ failures into tidegate's dead-letter queue, with the reason.

RQ keeps a failed job in its ``FailedJobRegistry`` with a traceback: no reason an
operator can filter on, and nothing shared with the Celery side. Either hook below
turns a job that failed *for good* — RQ has no retry left for it — into a
:class:`~tidegate.load.DeadLetter` (keyed by the unit's idempotency key, so a job
failing twice is one record with ``attempts`` counting up). RQ's own handling still
runs after it (the job also lands in the ``FailedJobRegistry``). Both hooks may be
configured together: a failure is counted and dead-lettered once.

Worker-wide::

    rq worker edi.customs --exception-handler tidegate.integrations.rq.dead_letter_handler

Per job::

    queue.enqueue(f, doc, on_failure=Callback(tidegate.integrations.rq.dead_letter_on_failure))

**A worker killed mid-job** is recovered by RQ itself. A killed work horse (the
forked child running the job) is seen at once by its worker, which calls
:meth:`~tidegate.integrations.rq.JsonWorker.handle_work_horse_killed` and then fails
or retries the job; a killed worker (SIGKILL, OOM, a lost host) is found later:
every worker's maintenance (``--maintenance-interval``, 10 minutes by default) cleans
the ``StartedJobRegistry`` of executions whose heartbeat expired and reports each such
job to the exception handlers as ``AbandonedJobError``. Either hook then does not
dead-letter it: it marks it redelivered (:data:`REDELIVERED_META`) and gives it one RQ
retry, so RQ puts the *same job* back on its queue, and the lifecycle asks the
downstream (reconcile-by-lookup) before sending it again. A job a dead worker had
popped but not started, which RQ's intermediate-queue cleanup would fail, is retried the
same way (:class:`~tidegate.integrations.rq.JsonWorker`).
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

import redis
from rq.exceptions import AbandonedJobError
from rq.job import Job

from tidegate.delivery import RetryPolicy, dead_letter_for, verdict_for
from tidegate.errors import DownstreamRejected
from tidegate.integrations.rq._runtime import client_for_job, runtime_for
from tidegate.integrations.rq._serializer import ContentRefused, refusal
from tidegate.integrations.rq.engine import FAILURES_META, REDELIVERED_META, rq_unit
from tidegate.load.dlq import DeadLetter
from tidegate.logging import get_logger, key_hash

__all__ = [
    "FAILURES_META",
    "REDELIVERED_META",
    "dead_letter_handler",
    "dead_letter_on_failure",
    "dead_letter_refused",
    "failure_reason",
    "redeliver",
]

log = get_logger("tidegate.rq")

_LAST_FAILURE = "tidegate_last_failure"
_RECORDED = "tidegate_dead_lettered"


def failure_reason(exc: BaseException | None, attempts: int) -> str:
    """A short reason for a job that failed for good (never the exception's message)."""
    if exc is None:
        return "job failed"
    if isinstance(exc, DownstreamRejected):
        return verdict_for(exc, attempt=attempts - 1, throttles=0, policy=RetryPolicy()).reason
    name = type(exc).__name__
    if attempts > 1:
        return f"retries exhausted after {attempts} attempts ({name})"
    return f"unexpected error ({name})"


def _count_failure(job: Job, exc: BaseException | None) -> int:
    """Count this failure in ``job.meta`` (once, even if both hooks run); return the total.

    RQ re-enqueues a retried job with its meta, so the count survives retries — RQ's own
    ``number_of_retries`` only counts retries a job *returned*, not raised.
    """
    token = f"{os.getpid()}:{id(exc)}"
    if job.meta.get(_LAST_FAILURE) != token:
        job.meta[FAILURES_META] = int(job.meta.get(FAILURES_META, 0)) + 1
        job.meta[_LAST_FAILURE] = token
        job.save_meta()  # type: ignore[no-untyped-call]
    return int(job.meta[FAILURES_META])


def _record(job: Job, exc: BaseException | None, connection: redis.Redis | None) -> None:
    attempts = int(job.meta.get(FAILURES_META, 1))
    unit = rq_unit(job, "", job.args, job.kwargs)
    runtime_for(client_for_job(connection or job.connection)).dlq.add(
        dead_letter_for(
            unit,
            reason=failure_reason(exc, attempts),
            exception=type(exc).__name__ if exc is not None else "",
            attempts=attempts,
            extra={"rq_job_id": job.id},
        )
    )


def redeliver(job: Job, *, cause: str = "worker_died") -> None:
    """``job``'s worker died mid-job: run it again, as a redelivery.

    One RQ retry (RQ's cleanup, or the worker whose work horse died, re-enqueues the
    same job right after this), and
    the mark that makes the lifecycle confirm with the downstream before sending: the
    dead worker may have been mid-call. Idempotent, as both hooks may run.
    """
    job.meta[REDELIVERED_META] = 1
    job.save_meta()  # type: ignore[no-untyped-call]
    if not job.retries_left:
        job.retries_left = 1
    log.warning(
        "rq_job_recovered",
        job_id=job.id,
        queue=job.origin,
        key_hash=key_hash(rq_unit(job, "", job.args, job.kwargs).key),
        reason=cause,
    )


def dead_letter_refused(
    job: Job, refused: ContentRefused, connection: redis.Redis | None = None
) -> DeadLetter:
    """Dead-letter a job whose data is not JSON, and report it; nothing of it is read.

    Keyed by the RQ job id (its arguments, where the idempotency key lives, are the
    unreadable part); the payload holds only where it was found.
    """
    letter = runtime_for(client_for_job(connection or job.connection)).dlq.add(
        DeadLetter(
            key=job.id,
            task="",
            reason=f"refused: {refused.problem}",
            exception=type(refused).__name__,
            payload={"queue": job.origin, "rq_job_id": job.id},
        )
    )
    log.error(
        "rq_job_refused",
        job_id=job.id,
        queue=job.origin,
        content=refused.content,
        error=type(refused).__name__,
    )
    return letter


def _on_failure(job: Job, exc: BaseException | None, connection: redis.Redis | None) -> None:
    refused = refusal(job)
    if refused is not None:
        # A JSON worker that is not a JsonWorker got here by failing to decode the
        # job; its meta is unreadable too, so nothing is counted or saved on the job.
        dead_letter_refused(job, refused, connection)
        return
    if isinstance(exc, AbandonedJobError):
        redeliver(job)
        return
    _count_failure(job, exc)
    if not job.should_retry and job.meta.get(_RECORDED) != job.meta.get(_LAST_FAILURE):
        _record(job, exc, connection)
        job.meta[_RECORDED] = job.meta.get(_LAST_FAILURE)
        job.save_meta()  # type: ignore[no-untyped-call]


def dead_letter_handler(
    job: Job,
    exc_type: type[BaseException] | None,
    exc_value: BaseException | None,
    traceback: TracebackType | None,
) -> bool:
    """An RQ exception handler: dead-letter a job that RQ will not retry.

    Returns ``True``, so RQ's next handlers (and its default one) still run.
    """
    _on_failure(job, exc_value, None)
    return True


def dead_letter_on_failure(
    job: Job,
    connection: redis.Redis,
    exc_type: type[BaseException] | None = None,
    exc_value: BaseException | None = None,
    traceback: TracebackType | None = None,
    *_: Any,
) -> None:
    """An RQ ``on_failure`` callback doing what :func:`dead_letter_handler` does."""
    _on_failure(job, exc_value, connection)
