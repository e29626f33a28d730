"""A Celery task whose body is one downstream call, run through that downstream's gate.

    @app.task(base=GatedTask, downstream="customs", name="edi.customs.submit")
    def submit(envelope):
        return customs.send("/declarations", envelope["body"],
                            idempotency_key=envelope["key"])

Around the body: ``gate.slot()`` (rate + concurrency lease + fleet pause). A short wait
happens in place — the worker holds its one message while the backlog stays in the
broker. Anything else goes through :func:`tidegate.delivery.verdict_for`: a long wait
or a transient failure *parks* the message durably in Redis (never a Celery
``countdown``, whose ETA tasks sit in worker memory), an unrecoverable answer
dead-letters it with the reason, a 429 (the client has already paused the whole fleet)
is absorbed in place. In every case the message is acknowledged only once it is
delivered, parked or dead-lettered — so each unit ends in exactly one place.

Around the call, the delivery ledger (:mod:`tidegate.load.ledger`) keeps the unit
from reaching the downstream twice: ``sending`` is written just before the call and
``delivered`` after it. A unit that finds ``delivered`` is skipped; one that finds
``sending`` — its previous run died between the downstream's yes and the record —
asks the downstream first (:meth:`GatedTask.confirm_delivery`, a lookup by
idempotency key) and sends only if the answer is no. Once the call succeeded, nothing
can requeue the unit: a Redis failure while recording it is logged, not raised.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from tidegate.delivery import Action, RetryPolicy, Verdict, judge_now
from tidegate.errors import BackendError, ConfigurationError, MalformedUnit
from tidegate.integrations.celery.runtime import Runtime, runtime
from tidegate.load import DeadLetter, DeliveryState
from tidegate.logging import get_logger, key_hash

__all__ = ["ATTEMPT_HEADER", "FIRST_FAILED_HEADER", "REPLAY_HEADER", "GatedTask"]

log = get_logger("tidegate.celery")

#: Message header carrying the failed-attempt count across parking and republishing.
ATTEMPT_HEADER = "tidegate_attempt"
#: Message header carrying the unit's first failure (epoch s, fleet clock: Redis TIME).
FIRST_FAILED_HEADER = "tidegate_first_failed_at"
#: Message header set by a DLQ replay: on delivery, the DLQ record is removed.
REPLAY_HEADER = "tidegate_replay"

_CELERY_CONTROL_FLOW = (Retry, Ignore, Reject)
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
    """

    abstract = True
    downstream: ClassVar[str] = ""
    max_wait_s: ClassVar[float] = 10.0
    retry_policy: ClassVar[RetryPolicy] = RetryPolicy()
    skip_delivered: ClassVar[bool] = True
    lookup_path: ClassVar[str | None] = None
    required_fields: ClassVar[tuple[str, ...]] = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.downstream:
            raise ConfigurationError(f"task {self.name} has no downstream to gate")
        rt = runtime(self.app)
        key = self.idempotency_key(args, kwargs)
        attempt = int(self._header(ATTEMPT_HEADER) or 0)
        first_failed = _epoch_or_none(self._header(FIRST_FAILED_HEADER))
        gate = rt.gate(self.downstream)
        throttles = 0
        uncertain: bool | None = None  # unknown until the ledger was read
        while True:
            try:
                if uncertain is None:
                    self.check_unit(args, kwargs)
                    state = (
                        rt.ledger.state(self.downstream, key)
                        if self.skip_delivered
                        else DeliveryState.NEW
                    )
                    if state is DeliveryState.DELIVERED:
                        log.info(
                            "delivery_skipped",
                            task=self.name,
                            key_hash=key_hash(key),
                            reason="already_delivered",
                        )
                        self._settle(rt, key, mark=False)
                        return {"tidegate": "already_delivered"}
                    uncertain = state is DeliveryState.SENDING
                with gate.slot(max_wait=self.max_wait_s):
                    if uncertain and self._confirmed(key):
                        self._settle(rt, key, mark=True)
                        return {"tidegate": "already_delivered"}
                    uncertain = False
                    rt.ledger.sending(self.downstream, key)
                    result = self.run(*args, **kwargs)
            except _CELERY_CONTROL_FLOW:
                raise
            except Exception as exc:
                verdict, first_failed = judge_now(
                    gate,
                    exc,
                    attempt=attempt,
                    throttles=throttles,
                    policy=self.retry_policy,
                    first_failed_at=first_failed,
                )
                if verdict.action is Action.RETRY_IN_PLACE:
                    throttles += 1
                    continue
                if verdict.action is Action.REQUEUE:
                    log.error(
                        "task_requeued",
                        task=self.name,
                        key_hash=key_hash(key),
                        reason=verdict.reason,
                    )
                    raise Reject(verdict.reason, requeue=True) from exc
                if verdict.action is Action.PARK:
                    return self._park(rt, args, kwargs, verdict, first_failed)
                return self._dead_letter(rt, args, kwargs, verdict, exc)
            # Delivered: from here on nothing may send it again or requeue it.
            self._settle(rt, key, mark=True)
            return result

    def check_unit(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise :class:`~tidegate.errors.MalformedUnit` for a unit the body cannot use.

        Runs before the gate, so a broken message costs the downstream nothing. The
        default checks :attr:`required_fields`; override for more.
        """
        if not self.required_fields:
            return
        envelope = args[0] if args else None
        key = self.idempotency_key(args, kwargs)
        if not isinstance(envelope, Mapping):
            raise MalformedUnit(key, "envelope is not a JSON object")
        missing = [name for name in self.required_fields if name not in envelope]
        if missing:
            raise MalformedUnit(key, f"envelope lacks {', '.join(map(repr, missing))}")

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

    def _confirmed(self, key: str) -> bool:
        confirmed = self.confirm_delivery(key)
        log.info(
            "delivery_reconciled",
            task=self.name,
            downstream=self.downstream,
            key_hash=key_hash(key),
            outcome={True: "accepted_before", False: "not_received", None: "unknown"}[confirmed],
        )
        return confirmed is True

    def _settle(self, rt: Runtime, key: str, *, mark: bool) -> None:
        """Record a delivered unit; a Redis failure here is logged, never raised.

        Raising would requeue a unit the downstream already has. If the mark cannot be
        written, the ledger still says ``sending`` and a redelivery asks the
        downstream (:meth:`confirm_delivery`) before sending again.
        """
        if mark:
            for pause in (*_MARK_BACKOFF_S, None):
                try:
                    rt.ledger.mark(self.downstream, key)
                    break
                except BackendError as exc:
                    if pause is None:
                        log.error(
                            "ledger_mark_failed",
                            task=self.name,
                            downstream=self.downstream,
                            key_hash=key_hash(key),
                            error=type(exc).__name__,
                        )
                    else:
                        time.sleep(pause)
        try:
            self._replay_done(rt, key)
        except BackendError as exc:
            log.warning(
                "dlq_resolve_failed",
                task=self.name,
                key_hash=key_hash(key),
                error=type(exc).__name__,
            )
        self._forget(rt, key)

    def _forget(self, rt: Runtime, key: str) -> None:
        """The unit has settled: the orphan sweep need not watch it any more."""
        try:
            rt.outstanding.settle(key)
        except BackendError as exc:
            # A stale record costs one sweep a ledger lookup, nothing more.
            log.warning(
                "outstanding_settle_failed",
                task=self.name,
                key_hash=key_hash(key),
                error=type(exc).__name__,
            )

    def _header(self, name: str) -> Any:
        """A tidegate message header: a worker puts custom headers on the request
        itself, ``task.apply(headers=...)`` (eager mode) leaves them in ``headers``."""
        value = self.request.get(name)
        if value is None:
            value = (self.request.get("headers") or {}).get(name)
        return value

    def _replay_done(self, rt: Runtime, key: str) -> None:
        """A replayed unit was delivered: its dead letter is resolved."""
        if self._header(REPLAY_HEADER) and rt.dlq.remove(key):
            log.info("dlq_item_resolved", task=self.name, key_hash=key_hash(key))

    def idempotency_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The unit's key: ``kwargs["idempotency_key"]``, an envelope's ``"key"``, or the id."""
        if "idempotency_key" in kwargs:
            return str(kwargs["idempotency_key"])
        if args and isinstance(args[0], Mapping) and "key" in args[0]:
            return str(args[0]["key"])
        return str(self.request.id)

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
        envelope = self._envelope(args, kwargs)
        envelope["attempt"] = verdict.attempt
        if first_failed is not None:
            envelope["first_failed_at"] = first_failed
        envelope["replay"] = int(self._header(REPLAY_HEADER) or 0)
        envelope["key"] = self.idempotency_key(args, kwargs)
        rt.parking.park(envelope, delay_s=verdict.delay_s, reason=verdict.reason)
        return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}

    def _dead_letter(
        self,
        rt: Runtime,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        verdict: Verdict,
        exc: BaseException,
    ) -> dict[str, Any]:
        envelope = args[0] if args and isinstance(args[0], Mapping) else {}
        letter_key = self.idempotency_key(args, kwargs)
        rt.dlq.add(
            DeadLetter(
                key=letter_key,
                task=self.name,
                reason=verdict.reason,
                exception=type(exc).__name__,
                attempts=verdict.attempt,
                payload=self._envelope(args, kwargs),
                bl_number=envelope.get("bl_number"),
                batch_id=envelope.get("batch_id"),
            )
        )
        self._forget(rt, letter_key)
        return {"tidegate": "dead_lettered", "reason": verdict.reason}


def _epoch_or_none(value: Any) -> float | None:
    """A header's epoch seconds, or ``None`` when absent or unreadable."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
