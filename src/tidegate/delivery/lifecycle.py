"""The unit lifecycle: every decision between a unit's arrival and its end, sans I/O.

One generator, :func:`lifecycle`, for every engine. It yields
:mod:`~tidegate.delivery.steps` and is sent their answers (or has their exceptions
thrown in); a driver (:func:`tidegate.delivery.driver.deliver`) carries them out
against an engine (Celery, RQ, an in-memory one) and the stores. So the ledger,
reconcile-by-lookup, the commit wait, the verdict and the horizon are written once::

    check unit ─ malformed → dead-letter with the reason
    read ledger ─ delivered → settle, skip
               └ sending, younger than max_request_s → park until it can have finished
    doubt? (ledger sending, redelivered, earlier attempts, replay, Redis restarted)
    acquire the gate ─ in doubt → confirm by lookup ─ accepted before → settle, skip
    mark sending → call → release → mark delivered → resolve replay → forget
    any failure → judge (fleet clock): retry in place | park | dead-letter | requeue

Two edges make the ledger's word insufficient, both handled here:

- a host crash loses the last second of Redis's append-only file, ``delivered`` marks
  with it. So a unit that finds *no* record asks the downstream too when it is not
  new: the engine says it was handed out before (``redelivered``), it carries earlier
  attempts, or it is a DLQ replay; or Redis restarted a moment ago;
- a downstream that commits at the end of a slow request answers a lookup "not
  received" while that request still runs. With ``max_request_s`` set, a call that
  may have reached it and got no answer parks the unit until ``max_request_s`` after
  the call started, and a unit that finds ``sending`` younger than that parks for the
  rest of it: the lookup is asked only once the earlier request can have finished.

``sending`` is written after the gate admits, with the lease held, though it keeps a
connection idle for one Redis round trip: its send time starts that commit wait, and
written before the admission it would start it up to ``max_wait_s`` early — a lookup
asked while the request still runs answers "not received", and the unit is sent twice.
What the lease's hold should not contain is built before it (the downstream client,
:meth:`tidegate.runtime.Runtime.stores`) or done without a wait (the renewer,
:mod:`tidegate.flow.permit`). A relayed downstream (:mod:`tidegate.downstream.relay`)
takes no lease here at all: its lanes hold them, and the lifecycle is the same, the call
going through the relay's transport. Its request may wait in the relay's queue after
``sending``, which is why a relayed downstream cannot have a commit wait yet (the
settings refuse ``_RELAY_DEPTH`` with ``_MAX_REQUEST_S``).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tidegate.delivery import steps
from tidegate.delivery.unit import Unit
from tidegate.delivery.verdict import Action, RetryPolicy, Verdict, judge
from tidegate.errors import BackendError, DownstreamUnavailable
from tidegate.load.ledger import DeliveryState, LedgerEntry

__all__ = [
    "AWAITING_COMMIT",
    "LifecyclePolicy",
    "Requeue",
    "commit_wait_s",
    "doubt",
    "lifecycle",
    "may_have_reached",
]

#: The park reason of a unit waiting for an earlier request to be over.
AWAITING_COMMIT = "awaiting_downstream_commit"

#: Answers that say the downstream did not take the request in (it may be resent
#: without waiting): 408 it timed out reading it, 429/503 it refused it.
_NOT_TAKEN_STATUSES = frozenset({408, 429, 503})
#: Transport errors raised before the request was written: it never left this host.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Exceptions (by name, as the verdict judges them) that interrupt a call mid-way.
_INTERRUPTED_NAMES = frozenset({"SoftTimeLimitExceeded", "TimeoutError", "ConnectionError"})

_NEW = LedgerEntry(DeliveryState.NEW, None, 0.0)

ALREADY_DELIVERED: dict[str, Any] = {"tidegate": "already_delivered"}


@dataclass(frozen=True, slots=True)
class LifecyclePolicy:
    """How one kind of unit is delivered.

    Attributes:
        max_wait_s: the longest wait in place for the gate before parking.
        retry: attempts, horizon and backoff for transient failures.
        skip_delivered: consult the ledger (skip delivered units, reconcile doubtful ones).
        max_request_s: how long the downstream may take to finish a request it
            received; ``None``: it records a write when it takes it in.
    """

    max_wait_s: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    skip_delivered: bool = True
    max_request_s: float | None = None


@dataclass(frozen=True, slots=True)
class Requeue:
    """The lifecycle's end when nothing can be parked or dead-lettered (Redis is down):
    the engine must hand the unit back to its broker."""

    reason: str
    error: Exception


Flow = Generator[steps.Step, Any, Any]


def lifecycle(unit: Unit, policy: LifecyclePolicy) -> Flow:
    """Deliver ``unit``: yields steps, returns the unit's result or a :class:`Requeue`.

    The result is the body's return value, or ``{"tidegate": "already_delivered" |
    "dead_lettered", ...}``, or the engine's answer to :class:`~steps.Park`.
    """
    attempt, first_failed = unit.attempt, unit.first_failed_at
    throttles = 0
    basis: str | None = None  # why the ledger's word is not enough; None: it is
    checked = False
    while True:
        call_started: float | None = None
        try:
            if not checked:
                yield steps.CheckUnit()
                entry = (yield steps.ReadLedger()) if policy.skip_delivered else _NEW
                if entry.state is DeliveryState.DELIVERED:
                    yield steps.Decision("delivery_skipped", {"reason": "already_delivered"})
                    yield from _settle(unit, mark=False)
                    return dict(ALREADY_DELIVERED)
                wait_s = commit_wait_s(entry, policy.max_request_s)
                if wait_s > 0:
                    verdict = Verdict(Action.PARK, wait_s, AWAITING_COMMIT, attempt)
                    return (yield steps.Park(verdict, first_failed))
                basis = doubt(entry, unit) if policy.skip_delivered else None
                checked = True
            yield steps.Acquire(policy.max_wait_s)
            if basis is not None:
                confirmed = yield steps.ConfirmByLookup(basis)
                if confirmed is True:
                    yield steps.Release()
                    yield from _settle(unit, mark=True)
                    return dict(ALREADY_DELIVERED)
            basis = None
            call_started = yield steps.Now()
            yield steps.MarkSending()
            result = yield steps.Call()
            yield steps.Release()
        except Exception as exc:
            verdict, first_failed = yield from _judge(
                exc, attempt=attempt, throttles=throttles, first_failed=first_failed, policy=policy
            )
            if verdict.action is Action.RETRY_IN_PLACE:
                throttles += 1
                continue
            if verdict.action is Action.REQUEUE:
                yield steps.Decision("task_requeued", {"reason": verdict.reason}, "error")
                return Requeue(verdict.reason, exc)
            if verdict.action is Action.PARK:
                if call_started is not None and policy.max_request_s:
                    verdict = yield from _await_request(
                        exc, verdict, call_started, policy.max_request_s
                    )
                return (yield steps.Park(verdict, first_failed))
            yield steps.DeadLetter(verdict.reason, type(exc).__name__, verdict.attempt)
            yield steps.Forget()
            return {"tidegate": "dead_lettered", "reason": verdict.reason}
        # Delivered: from here on nothing may send it again or requeue it.
        yield from _settle(unit, mark=True)
        return result


def _judge(
    exc: Exception,
    *,
    attempt: int,
    throttles: int,
    first_failed: float | None,
    policy: LifecyclePolicy,
) -> Generator[steps.Step, Any, tuple[Verdict, float | None]]:
    """The verdict at the fleet clock's time. If Redis cannot even tell the time,
    nothing can be parked or dead-lettered either: the clock's error is judged."""
    judged: BaseException = exc
    try:
        now_s = yield steps.ReadClock()
    except BackendError as clock_exc:
        judged, now_s = clock_exc, 0.0
    return judge(
        judged,
        now_s=now_s,
        first_failed_at=first_failed,
        attempt=attempt,
        throttles=throttles,
        policy=policy.retry,
    )


def _settle(unit: Unit, *, mark: bool) -> Generator[steps.Step, Any, None]:
    """Record a delivered unit, resolve its replay, stop watching it (all best effort)."""
    if mark:
        yield steps.MarkDelivered()
    if unit.replay:
        yield steps.ResolveReplay()
    yield steps.Forget()


def _await_request(
    exc: Exception, verdict: Verdict, call_started: float, max_request_s: float
) -> Generator[steps.Step, Any, Verdict]:
    """Park a unit whose call may still be running downstream until it can have
    finished: neither a lookup nor a resend means anything before. A call refused
    outright cannot be running: the ledger forgets its send time, so that the next
    attempt does not wait for it."""
    if not may_have_reached(exc):
        yield steps.MarkRefused()
        return verdict
    left_s = max_request_s - ((yield steps.Now()) - call_started)
    if left_s <= verdict.delay_s:
        return verdict
    yield steps.Decision(
        "delivery_awaiting_commit", {"error": type(exc).__name__, "wait_s": round(left_s, 3)}
    )
    return verdict._replace(delay_s=left_s)


def doubt(entry: LedgerEntry, unit: Unit) -> str | None:
    """Why the unit must ask the downstream before sending, or ``None`` if it need not.

    ``sending``: an earlier attempt may have landed. No record at all proves nothing
    either when the unit is not new, or when Redis restarted a moment ago: the ledger
    may have lost the record with the last second of Redis's append-only file (a host
    crash) — and the broker, the pop of the message.
    """
    if entry.state is DeliveryState.SENDING:
        return "ledger_sending"
    if unit.redelivered:
        return "redelivered"
    if unit.attempt > 0 or unit.first_failed_at is not None:
        return "earlier_attempts"
    if unit.replay:
        return "replay"
    if entry.in_doubt:
        return "redis_restarted"
    return None


def commit_wait_s(entry: LedgerEntry, max_request_s: float | None) -> float:
    """Seconds until the attempt recorded in ``entry`` can have finished downstream.

    Both instants come from Redis ``TIME``; an entry without a send time (written by
    an older version) or a downstream without ``max_request_s`` never waits.
    """
    if not max_request_s or entry.state is not DeliveryState.SENDING or entry.sent_at_ms is None:
        return 0.0
    return max(0.0, max_request_s - (entry.now_ms - entry.sent_at_ms) / 1000.0)


def may_have_reached(exc: BaseException) -> bool:
    """Whether the failed call may be in the downstream's hands, still running there.

    A refusal (429, 503, 408) or a connection never made did not reach it; a timeout,
    a connection dropped mid-answer, a 5xx from a proxy or an unreadable 2xx may have.
    """
    if isinstance(exc, DownstreamUnavailable):
        if exc.status is not None:
            return exc.status not in _NOT_TAKEN_STATUSES
        return not isinstance(exc.__cause__, _NEVER_SENT)
    return type(exc).__name__ in _INTERRUPTED_NAMES
