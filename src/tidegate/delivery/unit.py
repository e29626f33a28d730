"""A unit's identity, written once for every engine: its key, its dead letter, its checks.

A unit is one downstream write: a Celery task or an RQ job whose body calls one gated
downstream. Whichever engine runs it, it is known by the same idempotency key
(:func:`unit_key`), checked by the same rule (:func:`check_required_fields`) and, if
it cannot be delivered, becomes the same :class:`~tidegate.load.DeadLetter`
(:func:`dead_letter_for`) — one that says which engine and which task or function it
belongs to, so ``tidegate dlq replay`` can hand it back to that engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidegate.errors import ConfigurationError, MalformedUnit
from tidegate.load.dlq import DeadLetter

__all__ = [
    "Unit",
    "check_required_fields",
    "dead_letter_for",
    "max_request_s_for",
    "unit_key",
]


def unit_key(args: object, kwargs: object) -> str | None:
    """A unit's idempotency key from a task's arguments: an ``idempotency_key`` keyword,
    else the envelope's ``"key"`` (the first positional argument), else None.

    The one rule every engine adapter, the orphan sweep, the dead-letter paths and the
    reports use, so a unit is known by the same key wherever it is seen.
    """
    if isinstance(kwargs, Mapping) and "idempotency_key" in kwargs:
        return str(kwargs["idempotency_key"])
    first = args[0] if isinstance(args, list | tuple) and args else None
    if isinstance(first, Mapping) and "key" in first:
        return str(first["key"])
    return None


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit as its engine delivered it, with what earlier attempts left on it.

    Attributes:
        key: the idempotency key (:func:`unit_key`, else the engine's message id).
        downstream: the gate (and downstream) it is written to.
        engine: ``"celery"``, ``"rq"`` or ``"memory"``.
        task: the Celery task name or the RQ function path.
        args / kwargs: the call's arguments (JSON).
        queue: the queue it came from, where a replay sends it back.
        attempt: failed delivery attempts so far.
        first_failed_at: its first failure (epoch s, fleet clock), ``None`` if none.
        redelivered: the engine says it handed this unit out before (a broker
            redelivery, an RQ job recovered from a dead worker).
        replay: the DLQ replay number it carries (0: not a replay).
    """

    key: str
    downstream: str
    engine: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str = ""
    attempt: int = 0
    first_failed_at: float | None = None
    redelivered: bool = False
    replay: int = 0

    @property
    def envelope(self) -> Mapping[str, Any]:
        """The first argument when it is an envelope (a JSON object), else empty."""
        first = self.args[0] if self.args else None
        return first if isinstance(first, Mapping) else {}


def dead_letter_for(
    unit: Unit,
    *,
    reason: str,
    exception: str,
    attempts: int,
    extra: Mapping[str, Any] | None = None,
) -> DeadLetter:
    """The dead letter of ``unit``: what a replay through its engine needs, never more.

    Args:
        unit: the unit that gave up.
        reason: the verdict's reason.
        exception: the exception class name.
        attempts: failed attempts, this one included.
        extra: engine details for the payload (e.g. RQ's job id).
    """
    envelope = unit.envelope
    return DeadLetter(
        key=unit.key,
        task=unit.task,
        reason=reason,
        exception=exception,
        attempts=attempts,
        payload={
            "task": unit.task,
            "args": list(unit.args),
            "kwargs": dict(unit.kwargs),
            "queue": unit.queue,
            **(extra or {}),
        },
        bl_number=envelope.get("bl_number"),
        batch_id=envelope.get("batch_id"),
        engine=unit.engine,
    )


def check_required_fields(key: str, args: Sequence[Any], required_fields: Sequence[str]) -> None:
    """Raise :class:`~tidegate.errors.MalformedUnit` for an envelope lacking a field.

    The default malformed-unit check of every engine: it runs before the gate, so a
    broken message costs the downstream nothing.
    """
    if not required_fields:
        return
    envelope = args[0] if args else None
    if not isinstance(envelope, Mapping):
        raise MalformedUnit(key, "envelope is not a JSON object")
    missing = [name for name in required_fields if name not in envelope]
    if missing:
        raise MalformedUnit(key, f"envelope lacks {', '.join(map(repr, missing))}")


def max_request_s_for(value: Any, source: str, configured: float | None) -> float | None:
    """How long a downstream may take to finish a request it received (seconds).

    ``value`` (from the task or decorator, named ``source`` in errors), else
    ``configured`` (``TIDEGATE_<DOWNSTREAM>_MAX_REQUEST_S``, read by
    :meth:`tidegate.settings.Settings.downstream`), else ``None`` (no commit wait).

    Raises:
        ConfigurationError: ``value`` is not a finite number >= 0.
    """
    if value is None:
        return configured
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigurationError(f"{source} must be a finite number >= 0, got {value!r}")
    return seconds
