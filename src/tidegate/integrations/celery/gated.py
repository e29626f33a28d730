"""A Celery task whose body is one downstream call, run through the unit lifecycle.

    @app.task(base=GatedTask, downstream="customs", name="edi.customs.submit")
    def submit(envelope):
        return customs.send("/declarations", envelope["body"],
                            idempotency_key=envelope["key"])

Everything around the body — the malformed-unit check, the delivery ledger,
reconcile-by-lookup, the gate, the commit wait, park / dead-letter / requeue and the
horizon — is :mod:`tidegate.delivery.lifecycle`, the same for every engine. This
module is only Celery's side of it (:class:`_CeleryEngine`): it reads the message's
headers (:data:`ATTEMPT_HEADER`, :data:`FIRST_FAILED_HEADER`, :data:`REPLAY_HEADER`,
``delivery_info["redelivered"]``), parks a message durably in Redis (never a Celery
``countdown``, whose ETA tasks sit in worker memory: the mover republishes it) and
requeues it with ``Reject(requeue=True)`` when Redis is down. In every case the
message is acknowledged only once it is delivered, parked or dead-lettered — so each
unit ends in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NoReturn

from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from tidegate.delivery import (
    AWAITING_COMMIT,
    LifecyclePolicy,
    RetryPolicy,
    Unit,
    Verdict,
    check_required_fields,
    deliver,
    max_request_s_for,
    unit_key,
)
from tidegate.errors import BackendError, ConfigurationError
from tidegate.integrations.celery.runtime import Runtime, runtime
from tidegate.logging import get_logger, key_hash

__all__ = [
    "ATTEMPT_HEADER",
    "AWAITING_COMMIT",
    "FIRST_FAILED_HEADER",
    "REPLAY_HEADER",
    "GatedTask",
]

log = get_logger("tidegate.celery")

#: Message header carrying the failed-attempt count across parking and republishing.
ATTEMPT_HEADER = "tidegate_attempt"
#: Message header carrying the unit's first failure (epoch s, fleet clock: Redis TIME).
FIRST_FAILED_HEADER = "tidegate_first_failed_at"
#: Message header set by a DLQ replay: on delivery, the DLQ record is removed.
REPLAY_HEADER = "tidegate_replay"

#: Retries of the ledger's "delivered" mark after a delivered call (seconds between).
_MARK_BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.8)


class GatedTask(Task[Any, Any]):
    """Base class for tasks that call one gated downstream (see the module docstring).

    Class attributes (also settable as ``@app.task(downstream=..., max_wait_s=...)``):
        downstream: the gate's name.
        max_wait_s: the longest wait in place before parking.
        retry_policy: attempts, horizon and backoff for transient failures.
        skip_delivered: consult the delivery ledger and skip a unit whose key the
            downstream already accepted (a redelivery, a replay of a delivered unit).
        lookup_path: the downstream's write path, when it answers ``GET
            <path>/<key>`` (see :meth:`confirm_delivery`).
        required_fields: keys the envelope (the first argument) must have; a unit
            without one is dead-lettered before the gate, as a malformed unit.
        max_request_s: how long the downstream may take to finish a request it
            received (seconds), committing it at the end: no lookup or resend of a
            unit happens sooner after its previous call started. ``None`` (the
            default) reads ``TIDEGATE_<DOWNSTREAM>_MAX_REQUEST_S``; unset, there is no
            such wait (right for a downstream that records a write when it takes it in).
    """

    abstract = True
    downstream: ClassVar[str] = ""
    max_wait_s: ClassVar[float] = 10.0
    retry_policy: ClassVar[RetryPolicy] = RetryPolicy()
    skip_delivered: ClassVar[bool] = True
    lookup_path: ClassVar[str | None] = None
    required_fields: ClassVar[tuple[str, ...]] = ()
    max_request_s: ClassVar[float | None] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.downstream:
            raise ConfigurationError(f"task {self.name} has no downstream to gate")
        rt = runtime(self.app)
        policy = LifecyclePolicy(
            max_wait_s=self.max_wait_s,
            retry=self.retry_policy,
            skip_delivered=self.skip_delivered,
            max_request_s=max_request_s_for(
                self.max_request_s,
                f"{self.name}.max_request_s",
                rt.settings_of(self.downstream).max_request_s,
            ),
        )
        stores = rt.stores(self.downstream)
        engine = _CeleryEngine(self, rt, args, kwargs)
        return deliver(engine, engine.unit(), stores, policy, mark_backoff_s=_MARK_BACKOFF_S)

    def check_unit(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise :class:`~tidegate.errors.MalformedUnit` for a unit the body cannot use.

        Runs before the gate, so a broken message costs the downstream nothing. The
        default checks :attr:`required_fields`; override for more.
        """
        check_required_fields(self.idempotency_key(args, kwargs), args, self.required_fields)

    def confirm_delivery(self, key: str) -> bool | None:
        """Ask the downstream whether it already accepted ``key``.

        Called, inside the gate, only when the ledger says a previous attempt may have
        reached the downstream without an answer being recorded (the worker was
        killed mid-call, the call timed out, Redis went away before the mark).
        ``True``: it did, do not send again. ``False``: send. ``None``: the
        downstream cannot say, send and rely on the idempotency key. The default asks
        ``GET <lookup_path>/<key>`` through this process's client when
        :attr:`lookup_path` is set; override for a downstream with another query.
        """
        if self.lookup_path is None:
            return None
        client = runtime(self.app).downstream(self.downstream)
        return client.lookup(self.lookup_path, idempotency_key=key) is not None

    def _header(self, name: str) -> Any:
        """A tidegate message header: a worker puts custom headers on the request
        itself, ``task.apply(headers=...)`` (eager mode) leaves them in ``headers``."""
        value = self.request.get(name)
        if value is None:
            value = (self.request.get("headers") or {}).get(name)
        return value

    def idempotency_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The unit's key (:func:`~tidegate.delivery.unit_key`), else the task id."""
        key = unit_key(tuple(args), kwargs)
        return key if key is not None else str(self.request.id)

    def _queue(self) -> str:
        info = self.request.delivery_info or {}
        queue = info.get("routing_key") or getattr(self, "queue", None)
        return str(queue or self.app.conf.task_default_queue)

    def _envelope(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "task": self.name,
            "args": list(args),
            "kwargs": dict(kwargs),
            "queue": self._queue(),
        }

    def _park(
        self,
        rt: Runtime,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        verdict: Verdict,
        first_failed: float | None,
    ) -> dict[str, Any]:
        """Park the message durably in Redis (never a Celery ``countdown``); the mover
        republishes it when due, with its attempt count and first failure."""
        envelope = self._envelope(args, kwargs)
        envelope["attempt"] = verdict.attempt
        if first_failed is not None:
            envelope["first_failed_at"] = first_failed
        envelope["replay"] = int(self._header(REPLAY_HEADER) or 0)
        envelope["key"] = self.idempotency_key(args, kwargs)
        rt.parking.park(envelope, delay_s=verdict.delay_s, reason=verdict.reason)
        try:
            rt.outstanding.hold(envelope["key"])  # the lot holds it: no orphan to look for
        except BackendError as exc:
            log.warning(
                "outstanding_hold_failed",
                task=self.name,
                key_hash=key_hash(envelope["key"]),
                error=type(exc).__name__,
            )
        return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}


class _CeleryEngine:
    """The lifecycle's engine for one execution of a :class:`GatedTask`."""

    name = "celery"
    passthrough: tuple[type[BaseException], ...] = (Retry, Ignore, Reject)

    def __init__(
        self, task: GatedTask, rt: Runtime, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        self.task, self.rt, self.args, self.kwargs = task, rt, tuple(args), dict(kwargs)

    def unit(self) -> Unit:
        """The unit with what the message carries: attempts, first failure, replay, and
        whether the broker handed it out before."""
        task = self.task
        info = task.request.delivery_info or {}
        return Unit(
            key=task.idempotency_key(self.args, self.kwargs),
            downstream=task.downstream,
            engine=self.name,
            task=str(task.name),
            args=self.args,
            kwargs=self.kwargs,
            queue=task._queue(),
            attempt=int(task._header(ATTEMPT_HEADER) or 0),
            first_failed_at=_epoch_or_none(task._header(FIRST_FAILED_HEADER)),
            redelivered=bool(info.get("redelivered") or task._header("redelivered")),
            replay=int(task._header(REPLAY_HEADER) or 0),
        )

    def check_unit(self, unit: Unit) -> None:
        self.task.check_unit(self.args, self.kwargs)

    def call(self, unit: Unit) -> Any:
        return self.task.run(*self.args, **self.kwargs)

    def confirm_delivery(self, unit: Unit) -> bool | None:
        return self.task.confirm_delivery(unit.key)

    def park(self, unit: Unit, verdict: Verdict, first_failed_at: float | None) -> Any:
        return self.task._park(self.rt, self.args, self.kwargs, verdict, first_failed_at)

    def requeue(self, unit: Unit, reason: str, error: Exception) -> NoReturn:
        raise Reject(reason, requeue=True) from error

    def letter_extra(self, unit: Unit) -> Mapping[str, Any]:
        return {}


def _epoch_or_none(value: Any) -> float | None:
    """A header's epoch seconds, or ``None`` when absent or unreadable."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
