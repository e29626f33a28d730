"""The steps the unit lifecycle asks its driver to carry out, and what each answers.

The lifecycle (:mod:`tidegate.delivery.lifecycle`) never does I/O: it yields one of
these and is sent back the answer, or has the step's exception thrown into it. A
driver (:mod:`tidegate.delivery.driver`) runs them against an engine and the stores.
Steps marked ``best_effort`` must not fail the unit: the driver logs a backend error
under ``failure_event`` and answers ``None`` (a delivered unit must never be
requeued because a record could not be written).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tidegate.delivery.verdict import Verdict

__all__ = [
    "Acquire",
    "Call",
    "CheckUnit",
    "ConfirmByLookup",
    "DeadLetter",
    "Decision",
    "Forget",
    "MarkDelivered",
    "MarkRefused",
    "MarkSending",
    "Now",
    "Park",
    "ReadClock",
    "ReadLedger",
    "Release",
    "ResolveReplay",
    "Step",
]


@dataclass(frozen=True, slots=True)
class Step:
    """Base of every step."""

    best_effort: ClassVar[bool] = False
    failure_event: ClassVar[str] = ""
    failure_level: ClassVar[str] = "warning"


@dataclass(frozen=True, slots=True)
class CheckUnit(Step):
    """Run the engine's malformed-unit check; raises ``MalformedUnit``. Answer: None."""


@dataclass(frozen=True, slots=True)
class ReadLedger(Step):
    """Read the unit's ledger entry. Answer: a :class:`~tidegate.load.ledger.LedgerEntry`."""


@dataclass(frozen=True, slots=True)
class Acquire(Step):
    """Enter the downstream's gate (rate, lease, pause), waiting at most ``max_wait_s``.

    Raises ``Throttled`` when it cannot admit in time. The slot is held until
    :class:`Release`, or until a step raises (the driver releases it first)."""

    max_wait_s: float


@dataclass(frozen=True, slots=True)
class Release(Step):
    """Leave the gate (no-op when not in it). Answer: None."""


@dataclass(frozen=True, slots=True)
class ConfirmByLookup(Step):
    """Ask the downstream whether it already accepted the unit.

    Answer: ``True`` (it did), ``False`` (send), ``None`` (it cannot say)."""

    basis: str


@dataclass(frozen=True, slots=True)
class Now(Step):
    """This process's monotonic clock, seconds. Answer: a float."""


@dataclass(frozen=True, slots=True)
class ReadClock(Step):
    """The fleet clock (Redis ``TIME``), epoch seconds; raises ``BackendError``."""


@dataclass(frozen=True, slots=True)
class MarkSending(Step):
    """Write ``sending`` in the ledger just before the call. Answer: None."""


@dataclass(frozen=True, slots=True)
class Call(Step):
    """Run the unit's body (the downstream call). Answer: its result."""


@dataclass(frozen=True, slots=True)
class MarkDelivered(Step):
    """Write ``delivered`` in the ledger (retried a few times). Answer: None."""

    best_effort: ClassVar[bool] = True
    failure_event: ClassVar[str] = "ledger_mark_failed"
    failure_level: ClassVar[str] = "error"


@dataclass(frozen=True, slots=True)
class MarkRefused(Step):
    """Forget the send time of a call refused outright (it is not running downstream)."""

    best_effort: ClassVar[bool] = True
    failure_event: ClassVar[str] = "ledger_mark_failed"


@dataclass(frozen=True, slots=True)
class ResolveReplay(Step):
    """A replayed unit settled: remove its dead letter. Answer: None."""

    best_effort: ClassVar[bool] = True
    failure_event: ClassVar[str] = "dlq_resolve_failed"


@dataclass(frozen=True, slots=True)
class Forget(Step):
    """The unit settled: the orphan sweep need not watch it any more. Answer: None."""

    best_effort: ClassVar[bool] = True
    failure_event: ClassVar[str] = "outstanding_settle_failed"


@dataclass(frozen=True, slots=True)
class Park(Step):
    """Hand the unit back to its engine to run again after ``verdict.delay_s``.

    Answer: the engine's outcome (``{"tidegate": "parked", ...}``)."""

    verdict: Verdict
    first_failed_at: float | None


@dataclass(frozen=True, slots=True)
class DeadLetter(Step):
    """Record the unit in the DLQ with the reason. Answer: None."""

    reason: str
    exception: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Decision(Step):
    """A decision with nothing to carry out but its report: one log event. Answer: None."""

    event: str
    fields: dict[str, Any] = field(default_factory=dict)
    level: str = "info"
