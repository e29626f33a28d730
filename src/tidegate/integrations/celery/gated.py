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

Two edges make the ledger's word insufficient:

- a host crash loses the last second of Redis's append-only file (``appendfsync
  everysec``), ``delivered`` marks with it. So a unit that finds *no* record asks the
  downstream too when its message is not new: the broker flags it redelivered
  (``delivery_info["redelivered"]``), or it carries earlier attempts
  (:data:`ATTEMPT_HEADER`, :data:`FIRST_FAILED_HEADER`) or is a DLQ replay;
- a downstream that commits at the end of a slow request answers a lookup "not
  received" while that request still runs — also after the client timed out. With
  :attr:`GatedTask.max_request_s` set (what the downstream may take to finish a
  request it received), a call that may have reached it and got no answer parks the
  unit until ``max_request_s`` after the call started, and a unit that finds the
  ledger at ``sending`` younger than that parks for the rest of it: the lookup is
  asked only once the earlier request can have finished.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx
from celery import Task
from celery.exceptions import Ignore, Reject, Retry

from tidegate.delivery import Action, RetryPolicy, Verdict, judge_now, unit_key
from tidegate.errors import (
    BackendError,
    ConfigurationError,
    DownstreamUnavailable,
    MalformedUnit,
)
from tidegate.integrations.celery.runtime import Runtime, runtime
from tidegate.load import DeadLetter, DeliveryState
from tidegate.load.ledger import LedgerEntry
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

#: The park reason of a unit waiting for an earlier request to be over.
AWAITING_COMMIT = "awaiting_downstream_commit"

_CELERY_CONTROL_FLOW = (Retry, Ignore, Reject)
#: Answers that say the downstream did not take the request in (it may be resent
#: without waiting): 408 it timed out reading it, 429/503 it refused it.
_NOT_TAKEN_STATUSES = frozenset({408, 429, 503})
#: Transport errors raised before the request was written: it never left this host.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Exceptions (by name, as delivery.py judges them) that interrupt a call mid-way.
_INTERRUPTED_NAMES = frozenset({"SoftTimeLimitExceeded", "TimeoutError", "ConnectionError"})
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
        key = self.idempotency_key(args, kwargs)
        attempt = int(self._header(ATTEMPT_HEADER) or 0)
        first_failed = _epoch_or_none(self._header(FIRST_FAILED_HEADER))
        max_request_s = self._max_request_s()
        gate = rt.gate(self.downstream)
        throttles = 0
        basis: str | None = None  # why the ledger's word is not enough; None: it is
        checked = False
        while True:
            call_started: float | None = None
            try:
                if not checked:
                    self.check_unit(args, kwargs)
                    entry = (
                        rt.ledger.entry(self.downstream, key)
                        if self.skip_delivered
                        else LedgerEntry(DeliveryState.NEW, None, 0.0)
                    )
                    settled = self._settled_before(rt, args, kwargs, entry, max_request_s)
                    if settled is not None:
                        return settled
                    basis = (
                        self._doubt(entry, attempt, first_failed) if self.skip_delivered else None
                    )
                    checked = True
                with gate.slot(max_wait=self.max_wait_s):
                    if basis is not None and self._confirmed(key, basis):
                        self._settle(rt, key, mark=True)
                        return {"tidegate": "already_delivered"}
                    basis = None
                    call_started = time.monotonic()
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
                    if call_started is not None and max_request_s:
                        left_s = max_request_s - (time.monotonic() - call_started)
                        verdict = self._await_request(rt, key, exc, verdict, left_s)
                    return self._park(rt, args, kwargs, verdict, first_failed)
                return self._dead_letter(rt, args, kwargs, verdict, exc)
            # Delivered: from here on nothing may send it again or requeue it.
            self._settle(rt, key, mark=True)
            return result

    def _settled_before(
        self,
        rt: Runtime,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        entry: LedgerEntry,
        max_request_s: float | None,
    ) -> dict[str, Any] | None:
        """What the ledger alone settles before the gate: a delivered unit is skipped, one
        whose previous call may still be running downstream is parked until it can have
        finished. ``None``: go on to the gate."""
        key = self.idempotency_key(args, kwargs)
        if entry.state is DeliveryState.DELIVERED:
            log.info(
                "delivery_skipped",
                task=self.name,
                key_hash=key_hash(key),
                reason="already_delivered",
            )
            self._settle(rt, key, mark=False)
            return {"tidegate": "already_delivered"}
        wait_s = _commit_wait_s(entry, max_request_s)
        if wait_s <= 0:
            return None
        attempt = int(self._header(ATTEMPT_HEADER) or 0)
        first_failed = _epoch_or_none(self._header(FIRST_FAILED_HEADER))
        verdict = Verdict(Action.PARK, wait_s, AWAITING_COMMIT, attempt)
        return self._park(rt, args, kwargs, verdict, first_failed)

    def _await_request(
        self, rt: Runtime, key: str, exc: Exception, verdict: Verdict, left_s: float
    ) -> Verdict:
        """Park a unit whose call may still be running downstream until it can have
        finished: neither a lookup nor a resend means anything before. A call refused
        outright cannot be running: the ledger forgets its send time, so that the next
        attempt does not wait for it."""
        if not _may_have_reached(exc):
            try:
                rt.ledger.refused(self.downstream, key)
            except BackendError as error:
                # The next attempt waits max_request_s for nothing: slower, not wrong.
                log.warning(
                    "ledger_mark_failed",
                    task=self.name,
                    downstream=self.downstream,
                    key_hash=key_hash(key),
                    error=type(error).__name__,
                )
            return verdict
        if left_s <= verdict.delay_s:
            return verdict
        log.info(
            "delivery_awaiting_commit",
            task=self.name,
            downstream=self.downstream,
            key_hash=key_hash(key),
            error=type(exc).__name__,
            wait_s=round(left_s, 3),
        )
        return verdict._replace(delay_s=left_s)

    def _doubt(self, entry: LedgerEntry, attempt: int, first_failed: float | None) -> str | None:
        """Why the unit must ask the downstream before sending, or ``None`` if it need not.

        ``sending``: an earlier attempt may have landed. No record at all proves
        nothing either when the message is not new, or when Redis restarted a moment
        ago: the ledger may have lost the record with the last second of Redis's
        append-only file (a host crash) — and the broker, the pop of the message.
        """
        if entry.state is DeliveryState.SENDING:
            return "ledger_sending"
        info = self.request.delivery_info or {}
        if info.get("redelivered") or self._header("redelivered"):
            return "redelivered"
        if attempt > 0 or first_failed is not None:
            return "earlier_attempts"
        if self._header(REPLAY_HEADER):
            return "replay"
        if entry.in_doubt:
            return "redis_restarted"
        return None

    def _max_request_s(self) -> float | None:
        """:attr:`max_request_s`, else ``TIDEGATE_<DOWNSTREAM>_MAX_REQUEST_S``, else ``None``."""
        value: Any = self.max_request_s
        source = f"{self.name}.max_request_s"
        if value is None:
            source = f"TIDEGATE_{self.downstream.upper()}_MAX_REQUEST_S"
            value = os.environ.get(source) or None
            if value is None:
                return None
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ConfigurationError(f"{source} must be a finite number >= 0, got {value!r}")
        return seconds

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

    def _confirmed(self, key: str, basis: str) -> bool:
        confirmed = self.confirm_delivery(key)
        log.info(
            "delivery_reconciled",
            task=self.name,
            downstream=self.downstream,
            key_hash=key_hash(key),
            basis=basis,
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


def _commit_wait_s(entry: LedgerEntry, max_request_s: float | None) -> float:
    """Seconds until the attempt recorded in ``entry`` can have finished downstream.

    Both instants come from Redis ``TIME``; an entry without a send time (written by
    an older version) or a downstream without ``max_request_s`` never waits.
    """
    if not max_request_s or entry.state is not DeliveryState.SENDING or entry.sent_at_ms is None:
        return 0.0
    return max(0.0, max_request_s - (entry.now_ms - entry.sent_at_ms) / 1000.0)


def _may_have_reached(exc: BaseException) -> bool:
    """Whether the failed call may be in the downstream's hands, still running there.

    A refusal (429, 503, 408) or a connection never made did not reach it; a timeout,
    a connection dropped mid-answer, a 5xx from a proxy or an unreadable 2xx may have.
    """
    if isinstance(exc, DownstreamUnavailable):
        if exc.status is not None:
            return exc.status not in _NOT_TAKEN_STATUSES
        return not isinstance(exc.__cause__, _NEVER_SENT)
    return type(exc).__name__ in _INTERRUPTED_NAMES


def _epoch_or_none(value: Any) -> float | None:
    """A header's epoch seconds, or ``None`` when absent or unreadable."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
