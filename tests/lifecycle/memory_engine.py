"""An in-memory engine for the unit lifecycle: a list for a broker, a lot for parking.

Only the engine side is in memory; the lifecycle and its driver are the ones Celery
and RQ run, and parking goes into a :class:`~tidegate.load.protocols.ParkingStore`
(the memory twin in the memory harness) the way the Celery engine parks. A "worker
killed mid-call" is a ``WorkerKilled`` (a ``BaseException``, as a SIGKILL is nothing
the worker can handle) raised after the downstream took the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from tidegate.delivery import Unit, Verdict, check_required_fields
from tidegate.load import DeadLetter
from tidegate.load.memory import MemoryParkingLot
from tidegate.load.protocols import ParkingStore


class WorkerKilled(BaseException):
    """The worker died between the downstream's yes and anything after it."""


@dataclass
class MemoryEngine:
    """The engine protocol of :mod:`tidegate.delivery.driver`, in memory.

    Attributes:
        body: the unit's downstream call.
        confirm: the downstream lookup (``True``: it has the key).
        required_fields: envelope keys a unit must have.
        lot: where :meth:`park` parks the unit's envelope (key, task, args, attempt,
            first failure, replay), as the Celery engine does.
        parked: what :meth:`park` was given, in order.
        die_after_call: the next call dies (``WorkerKilled``) once the body returned.
    """

    body: Callable[..., Any]
    confirm: Callable[[str], bool | None]
    required_fields: tuple[str, ...] = ()
    lot: ParkingStore = field(default_factory=MemoryParkingLot)
    parked: list[tuple[Unit, Verdict]] = field(default_factory=list)
    die_after_call: bool = False
    name: str = "memory"
    passthrough: tuple[type[BaseException], ...] = ()

    def check_unit(self, unit: Unit) -> None:
        check_required_fields(unit.key, unit.args, self.required_fields)

    def call(self, unit: Unit) -> Any:
        result = self.body(*unit.args, **unit.kwargs)
        if self.die_after_call:
            self.die_after_call = False
            raise WorkerKilled
        return result

    def confirm_delivery(self, unit: Unit) -> bool | None:
        return self.confirm(unit.key)

    def park(self, unit: Unit, verdict: Verdict, first_failed_at: float | None) -> Any:
        envelope = {
            "key": unit.key,
            "task": unit.task,
            "args": list(unit.args),
            "kwargs": dict(unit.kwargs),
            "queue": unit.queue,
            "attempt": verdict.attempt,
            "replay": unit.replay,
            **({} if first_failed_at is None else {"first_failed_at": first_failed_at}),
        }
        self.lot.park(envelope, delay_s=verdict.delay_s, reason=verdict.reason)
        self.parked.append(
            (replace(unit, attempt=verdict.attempt, first_failed_at=first_failed_at), verdict)
        )
        return {"tidegate": "parked", "reason": verdict.reason, "delay_s": verdict.delay_s}

    def requeue(self, unit: Unit, reason: str, error: Exception) -> NoReturn:
        raise error

    def letter_extra(self, unit: Unit) -> Mapping[str, Any]:
        return {}


def unit_of(
    envelope: Mapping[str, Any],
    *,
    attempt: int = 0,
    first_failed_at: float | None = None,
    redelivered: bool = False,
    replay: int = 0,
) -> Unit:
    """The unit a memory "broker" hands out for ``envelope``."""
    return Unit(
        key=str(envelope.get("key", "no-key")),
        downstream="customs",
        engine="memory",
        task="lifecycle.lodge",
        args=(dict(envelope),),
        queue="lifecycle",
        attempt=attempt,
        first_failed_at=first_failed_at,
        redelivered=redelivered,
        replay=replay,
    )


def unit_of_letter(letter: DeadLetter) -> Unit:
    """A replayed dead letter, as the memory broker hands it out again."""
    args = letter.payload.get("args") or [{}]
    return unit_of(args[0], replay=letter.replays + 1)
