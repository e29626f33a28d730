"""RQ's side of the unit lifecycle: what a job carries, how it is parked and requeued.

The lifecycle itself (ledger, reconcile-by-lookup, gate, commit wait, verdict,
horizon, dead letter) is :mod:`tidegate.delivery`, the same as Celery's. An RQ job
carries the lifecycle's metadata in ``job.meta``: the attempt count
(:data:`ATTEMPT_META`), the first failure (:data:`FIRST_FAILED_META`, fleet clock), the
DLQ replay number (:data:`REPLAY_META`) and whether RQ handed it out before
(:data:`REDELIVERED_META`: set when RQ recovered it from a dead worker, see
:mod:`tidegate.integrations.rq.dlq`). A parked job is re-scheduled with
``queue.enqueue_at`` — RQ's scheduled registry, a sorted set in Redis, not worker
memory; its whole-second resolution is rounded up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from rq.job import Job

from tidegate.delivery import Unit, Verdict, check_required_fields, unit_key
from tidegate.events import JobParked, emit
from tidegate.integrations.rq._serializer import json_queue
from tidegate.logging import get_logger

__all__ = [
    "ATTEMPT_META",
    "FIRST_FAILED_META",
    "REDELIVERED_META",
    "REPLAY_META",
    "RqEngine",
    "rq_unit",
]

log = get_logger("tidegate.rq")

#: ``job.meta`` key carrying the failed-attempt count across re-scheduling.
ATTEMPT_META = "tidegate_attempt"
#: Job meta carrying the unit's first failure (epoch s, fleet clock: Redis TIME).
FIRST_FAILED_META = "tidegate_first_failed_at"
#: Job meta set by a DLQ replay (its number): on delivery, the dead letter is removed.
REPLAY_META = "tidegate_replay"
#: Job meta set when RQ gives a job back after its worker died mid-job.
REDELIVERED_META = "tidegate_redelivered"
#: Job meta counting failed executions (RQ retries); written by the failure hooks.
FAILURES_META = "tidegate_failures"


def _epoch_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def rq_unit(job: Job, downstream: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Unit:
    """The unit an RQ job is, with what its meta carries.

    A job RQ runs again after a failed execution (its own ``Retry``) counts as
    redelivered too: the failed execution may have reached the downstream.
    """
    meta = job.meta
    key = unit_key(tuple(args), kwargs)
    return Unit(
        key=key if key is not None else job.id,
        downstream=downstream,
        engine="rq",
        task=str(job.func_name),
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=str(job.origin),
        attempt=int(meta.get(ATTEMPT_META, 0) or 0),
        first_failed_at=_epoch_or_none(meta.get(FIRST_FAILED_META)),
        redelivered=bool(meta.get(REDELIVERED_META) or meta.get(FAILURES_META)),
        replay=int(meta.get(REPLAY_META, 0) or 0),
    )


class RqEngine:
    """The lifecycle's engine for one execution of a gated RQ job.

    Args:
        job: the running job.
        body: the job's function (the downstream call).
        required_fields: envelope keys the unit must have (else it is malformed).
        check: an extra malformed-unit check (raises ``MalformedUnit``).
        confirm: asks the downstream whether it accepted a key (``None``: cannot say).
    """

    name = "rq"
    passthrough: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        job: Job,
        body: Callable[..., Any],
        *,
        required_fields: Sequence[str] = (),
        check: Callable[[Unit], None] | None = None,
        confirm: Callable[[str], bool | None] | None = None,
    ) -> None:
        self.job, self.body = job, body
        self.required_fields = tuple(required_fields)
        self.check, self.confirm = check, confirm

    def check_unit(self, unit: Unit) -> None:
        check_required_fields(unit.key, unit.args, self.required_fields)
        if self.check is not None:
            self.check(unit)

    def call(self, unit: Unit) -> Any:
        return self.body(*unit.args, **unit.kwargs)

    def confirm_delivery(self, unit: Unit) -> bool | None:
        return None if self.confirm is None else self.confirm(unit.key)

    def park(self, unit: Unit, verdict: Verdict, first_failed_at: float | None) -> Any:
        job = self.job
        queue = json_queue(job.origin, job.connection)
        due = datetime.now(UTC) + timedelta(seconds=verdict.delay_s)
        if due.microsecond:  # RQ's scheduled registry keeps whole seconds: never come back early
            due = due.replace(microsecond=0) + timedelta(seconds=1)
        meta = {**job.meta, ATTEMPT_META: verdict.attempt}
        if first_failed_at is not None:
            meta[FIRST_FAILED_META] = first_failed_at
        scheduled = queue.enqueue_at(
            due,
            str(job.func_name),
            args=list(unit.args),
            kwargs=dict(unit.kwargs),
            meta=meta,
            job_timeout=job.timeout,
            failure_ttl=job.failure_ttl,
        )
        emit(
            JobParked(
                job.id,
                scheduled.id,
                job.func_name,
                round(verdict.delay_s, 3),
                verdict.reason,
                verdict.attempt,
            )
        )
        return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}

    def requeue(self, unit: Unit, reason: str, error: Exception) -> NoReturn:
        """tidegate's Redis cannot be read or written (down, or too slow to answer):
        nothing can be parked or dead-lettered. The job fails with one more RQ retry, so
        RQ puts it back on its queue (as Celery's broker keeps a rejected message)
        instead of the failure hooks dead-lettering a unit that only met a bad moment."""
        self.job.retries_left = (self.job.retries_left or 0) + 1
        raise error

    def letter_extra(self, unit: Unit) -> Mapping[str, Any]:
        return {"rq_job_id": self.job.id}
