"""An RQ job whose body is one downstream call, run through that downstream's gate.

    @gated("customs", max_wait_s=10)
    def lodge(envelope):
        client = DownstreamClient("customs", CUSTOMS_URL, feedback=gate("customs"))
        return client.send("/declarations", envelope, idempotency_key=envelope["key"])

    queue.enqueue("myapp.jobs.lodge", envelope)

Around the body: ``gate.slot()`` (rate + concurrency lease + fleet pause). What
happens when it does not go through is decided by
:func:`tidegate.delivery.verdict_for`, exactly as for Celery's ``GatedTask``:

- a 429 (the client already paused the whole fleet) → retried in place a few times;
- the gate cannot admit within ``max_wait_s``, or the downstream is unavailable →
  the job is **re-scheduled** with ``queue.enqueue_at`` (RQ's scheduled registry: a
  sorted set in Redis, not worker memory; its whole-second resolution is rounded up)
  with the attempt count in ``job.meta``;
  throttling costs no attempt, backoff grows with each unavailable answer;
- the downstream refused the document, or the attempts are exhausted → the job is
  **dead-lettered** in tidegate's DLQ with the reason, and finishes;
- Redis unreachable → the exception propagates (RQ cannot do anything either).

Called outside an RQ job (a test, a script), the body still runs through the gate,
and anything that would be parked or dead-lettered is raised instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from rq.job import Job, get_current_job

from tidegate.delivery import Action, RetryPolicy, Verdict, judge_now
from tidegate.flow import Gate
from tidegate.integrations.rq._runtime import client_for_job, gate_for, prefix
from tidegate.integrations.rq._serializer import json_queue
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.logging import get_logger

__all__ = ["ATTEMPT_META", "gate", "gated", "idempotency_key"]

log = get_logger("tidegate.rq")

#: ``job.meta`` key carrying the failed-attempt count across re-scheduling.
ATTEMPT_META = "tidegate_attempt"
#: Job meta carrying the unit's first failure (epoch s, fleet clock: Redis TIME).
FIRST_FAILED_META = "tidegate_first_failed_at"

P = ParamSpec("P")
R = TypeVar("R")


def gate(name: str) -> Gate:
    """The current process's gate of downstream ``name`` (for a client's feedback)."""
    return gate_for(name)


def idempotency_key(job: Job | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The unit's key: ``kwargs["idempotency_key"]``, an envelope's ``"key"``, or the job id."""
    if "idempotency_key" in kwargs:
        return str(kwargs["idempotency_key"])
    if args and isinstance(args[0], Mapping) and "key" in args[0]:
        return str(args[0]["key"])
    return job.id if job is not None else ""


def _park(job: Job, verdict: Verdict, first_failed: float | None) -> dict[str, Any]:
    queue = json_queue(job.origin, job.connection)
    due = datetime.now(UTC) + timedelta(seconds=verdict.delay_s)
    if due.microsecond:  # RQ's scheduled registry keeps whole seconds: never come back early
        due = due.replace(microsecond=0) + timedelta(seconds=1)
    scheduled = queue.enqueue_at(
        due,
        str(job.func_name),
        args=list(job.args),
        kwargs=dict(job.kwargs),
        meta={
            **job.meta,
            ATTEMPT_META: verdict.attempt,
            **({} if first_failed is None else {FIRST_FAILED_META: first_failed}),
        },
        job_timeout=job.timeout,
        failure_ttl=job.failure_ttl,
    )
    log.info(
        "message_parked",
        job_id=job.id,
        scheduled_job_id=scheduled.id,
        task=job.func_name,
        delay_s=round(verdict.delay_s, 3),
        reason=verdict.reason,
        attempt=verdict.attempt,
    )
    return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}


def _dead_letter(job: Job, verdict: Verdict, exc: BaseException) -> dict[str, Any]:
    envelope = job.args[0] if job.args and isinstance(job.args[0], Mapping) else {}
    DeadLetterQueue(client_for_job(job.connection), prefix=prefix()).add(
        DeadLetter(
            key=idempotency_key(job, job.args, job.kwargs),
            task=str(job.func_name),
            reason=verdict.reason,
            exception=type(exc).__name__,
            attempts=verdict.attempt,
            payload={
                "task": job.func_name,
                "args": list(job.args),
                "kwargs": dict(job.kwargs),
                "queue": job.origin,
            },
            bl_number=envelope.get("bl_number"),
            batch_id=envelope.get("batch_id"),
        )
    )
    return {"tidegate": "dead_lettered", "reason": verdict.reason}


def gated(
    downstream: str,
    *,
    max_wait_s: float = 10.0,
    retry_policy: RetryPolicy | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R | dict[str, Any]]]:
    """Run the decorated job's body through gate ``downstream`` (see the module docstring).

    Args:
        downstream: the gate's name (shared with the Celery workers, if any).
        max_wait_s: the longest wait in place before the job is re-scheduled.
        retry_policy: attempts and backoff against an unavailable downstream.

    Returns:
        The decorator. A gated job returns the body's result, or a small dict
        ``{"tidegate": "parked" | "dead_lettered", "reason": ...}``.
    """
    policy = retry_policy or RetryPolicy()

    def decorate(func: Callable[P, R]) -> Callable[P, R | dict[str, Any]]:
        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | dict[str, Any]:
            job = get_current_job()
            the_gate = gate_for(downstream, client_for_job(job.connection if job else None))
            meta = job.meta if job is not None else {}
            attempt = int(meta.get(ATTEMPT_META, 0))
            first_failed = meta.get(FIRST_FAILED_META)
            throttles = 0
            while True:
                try:
                    with the_gate.slot(max_wait=max_wait_s):
                        return func(*args, **kwargs)
                except Exception as exc:
                    verdict, first_failed = judge_now(
                        the_gate,
                        exc,
                        attempt=attempt,
                        throttles=throttles,
                        policy=policy,
                        first_failed_at=first_failed,
                    )
                    if verdict.action is Action.RETRY_IN_PLACE:
                        throttles += 1
                        continue
                    if job is None or verdict.action is Action.REQUEUE:
                        raise
                    if verdict.action is Action.PARK:
                        return _park(job, verdict, first_failed)
                    return _dead_letter(job, verdict, exc)

        wrapper.tidegate_downstream = downstream  # type: ignore[attr-defined]
        return wrapper

    return decorate
