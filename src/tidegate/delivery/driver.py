"""The driver: runs the unit lifecycle against one engine and the shared stores.

The lifecycle (:func:`~tidegate.delivery.lifecycle.lifecycle`) decides; this loop
carries its steps out. What differs between Celery, RQ and the in-memory engine of
the tests is only the small :class:`Engine` protocol — check the unit, run its body,
ask the downstream, park it, hand it back to the broker. The gate, the ledger, the
DLQ and the outstanding registry (:class:`Stores`) are the same for every engine.

Exceptions: a step that raises is answered by throwing its exception into the
lifecycle, after leaving the gate (the slot never outlives a failed call). An
engine's own control-flow exceptions (:attr:`Engine.passthrough`, e.g. Celery's
``Retry``) leave the gate and propagate untouched. A best-effort step
(:attr:`~tidegate.delivery.steps.Step.best_effort`) that hits a backend error is
logged and answered ``None``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from tidegate.delivery import steps
from tidegate.delivery.lifecycle import LifecyclePolicy, Requeue, lifecycle
from tidegate.delivery.unit import Unit, dead_letter_for
from tidegate.delivery.verdict import Verdict, fleet_now_s
from tidegate.errors import BackendError
from tidegate.events import LetterResolved, emit
from tidegate.load.protocols import DeadLetterStore, LedgerStore, OutstandingStore
from tidegate.logging import get_logger, key_hash

if TYPE_CHECKING:
    from tidegate.flow import Gate

__all__ = [
    "DEFAULT_MARK_BACKOFF_S",
    "DeadLetterStore",
    "Engine",
    "LedgerStore",
    "OutstandingStore",
    "Stores",
    "deliver",
]

log = get_logger("tidegate.delivery")

#: Retries of the ledger's "delivered" mark after a delivered call (seconds between).
DEFAULT_MARK_BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.8)


class Engine(Protocol):
    """What one worker engine (Celery, RQ, in-memory) does for the lifecycle."""

    #: ``"celery"``, ``"rq"``, ``"memory"``: written into dead letters.
    name: str
    #: The engine's own control-flow exceptions: never judged, never swallowed.
    passthrough: tuple[type[BaseException], ...]

    def check_unit(self, unit: Unit) -> None:
        """Raise ``MalformedUnit`` for a unit the body cannot use."""

    def call(self, unit: Unit) -> Any:
        """Run the unit's body: the downstream call."""

    def confirm_delivery(self, unit: Unit) -> bool | None:
        """Ask the downstream whether it accepted ``unit.key`` (``None``: cannot say)."""

    def park(self, unit: Unit, verdict: Verdict, first_failed_at: float | None) -> Any:
        """Run the unit again in ``verdict.delay_s``, carrying the attempt count, the
        first failure and the replay number; durable (Redis), never worker memory."""

    def requeue(self, unit: Unit, reason: str, error: Exception) -> NoReturn:
        """Give the unit back to the broker (Redis is down: nothing else can keep it)."""

    def letter_extra(self, unit: Unit) -> Mapping[str, Any]:
        """Engine details a dead letter's payload keeps (e.g. RQ's job id)."""


@dataclass(frozen=True, slots=True)
class Stores:
    """The shared state the lifecycle reads and writes, whatever the engine.

    ``outstanding`` is ``None`` where no orphan sweep watches units (RQ: RQ's own
    started-job registry does, see :mod:`tidegate.integrations.rq`).
    """

    gate: Gate
    ledger: LedgerStore
    dlq: DeadLetterStore
    outstanding: OutstandingStore | None = None


def deliver(
    engine: Engine,
    unit: Unit,
    stores: Stores,
    policy: LifecyclePolicy,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    mark_backoff_s: Sequence[float] = DEFAULT_MARK_BACKOFF_S,
) -> Any:
    """Run ``unit`` through its whole lifecycle; return its result (see
    :func:`~tidegate.delivery.lifecycle.lifecycle`).

    Raises:
        Whatever :meth:`Engine.requeue` raises, an engine's passthrough exception,
        or a failure to park the unit after its verdict.
    """
    run = _Run(
        engine=engine,
        unit=unit,
        stores=stores,
        clock=clock,
        sleep=sleep,
        mark_backoff_s=tuple(mark_backoff_s),
    )
    flow = lifecycle(unit, policy)
    answer: Any = None
    error: Exception | None = None
    try:
        while True:
            try:
                step = flow.send(answer) if error is None else flow.throw(error)
            except StopIteration as stop:
                outcome = stop.value
                break
            answer, error = None, None
            try:
                answer = run.do(step)
            except engine.passthrough as exc:
                run.release(exc)
                raise
            except Exception as exc:
                run.release(exc)
                error = exc
    finally:
        run.release(None)
        flow.close()
    if isinstance(outcome, Requeue):
        engine.requeue(unit, outcome.reason, outcome.error)
    return outcome


class _Run:
    """One unit's I/O: each step carried out, the gate slot held in between."""

    def __init__(
        self,
        *,
        engine: Engine,
        unit: Unit,
        stores: Stores,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        mark_backoff_s: tuple[float, ...],
    ) -> None:
        self.engine, self.unit, self.stores = engine, unit, stores
        self.clock, self.sleep, self.mark_backoff_s = clock, sleep, mark_backoff_s
        self.slot: contextlib.ExitStack | None = None
        self.fields = {
            "task": unit.task,
            "downstream": unit.downstream,
            "engine": engine.name,
            "key_hash": key_hash(unit.key),
        }

    def release(self, exc: BaseException | None) -> None:
        slot, self.slot = self.slot, None
        if slot is not None:
            if exc is None:
                slot.close()
            else:
                slot.__exit__(type(exc), exc, exc.__traceback__)

    def do(self, step: steps.Step) -> Any:
        if not step.best_effort:
            return self._do(step)
        try:
            return self._do(step)
        except BackendError as exc:
            getattr(log, step.failure_level)(
                step.failure_event, **self.fields, error=type(exc).__name__
            )
            return None

    def _do(self, step: steps.Step) -> Any:  # noqa: PLR0912 - one branch per step
        unit, stores = self.unit, self.stores
        match step:
            case steps.CheckUnit():
                return self.engine.check_unit(unit)
            case steps.ReadLedger():
                return stores.ledger.entry(unit.downstream, unit.key)
            case steps.Acquire(max_wait_s=max_wait_s):
                slot = contextlib.ExitStack()
                slot.enter_context(stores.gate.slot(max_wait=max_wait_s))
                self.slot = slot
                return None
            case steps.Release():
                self.release(None)
                return None
            case steps.ConfirmByLookup(basis=basis):
                confirmed = self.engine.confirm_delivery(unit)
                outcome = {True: "accepted_before", False: "not_received", None: "unknown"}
                log.info(
                    "delivery_reconciled", **self.fields, basis=basis, outcome=outcome[confirmed]
                )
                return confirmed
            case steps.Now():
                return self.clock()
            case steps.ReadClock():
                return fleet_now_s(stores.gate)
            case steps.MarkSending():
                stores.ledger.sending(unit.downstream, unit.key)
                return None
            case steps.Call():
                return self.engine.call(unit)
            case steps.MarkDelivered():
                return self._mark_delivered()
            case steps.MarkRefused():
                stores.ledger.refused(unit.downstream, unit.key)
                return None
            case steps.ResolveReplay():
                if stores.dlq.remove(unit.key):
                    emit(LetterResolved(**self.fields))
                return None
            case steps.Forget():
                # A stale record costs one sweep a ledger lookup, nothing more.
                if stores.outstanding is not None:
                    stores.outstanding.settle(unit.key)
                return None
            case steps.Park(verdict=verdict, first_failed_at=first_failed_at):
                return self.engine.park(unit, verdict, first_failed_at)
            case steps.DeadLetter(reason=reason, exception=exception, attempts=attempts):
                letter = dead_letter_for(
                    unit,
                    reason=reason,
                    exception=exception,
                    attempts=attempts,
                    extra=self.engine.letter_extra(unit),
                )
                stores.dlq.add(letter)
                return None
            case steps.Decision(event=event, fields=fields, level=level):
                getattr(log, level)(event, **self.fields, **fields)
                return None
        raise TypeError(f"unknown lifecycle step {step!r}")

    def _mark_delivered(self) -> None:
        """Retry the mark a few times: if it cannot be written, the ledger still says
        ``sending`` and a redelivery asks the downstream before sending again."""
        for pause in self.mark_backoff_s:
            try:
                self.stores.ledger.mark(self.unit.downstream, self.unit.key)
                return
            except BackendError:
                self.sleep(pause)
        self.stores.ledger.mark(self.unit.downstream, self.unit.key)
