"""What each live view shows, built from raw Redis replies by pure functions.

No I/O here: :mod:`tidegate.console.reads` fetches each view's replies in one
pipelined round trip and hands them over, so the figures can be tested without Redis
and the round trip stays one however many gates or queues there are. Rows carry only
names, counts, ages, reasons and classes — never a payload, a B/L number or a party.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.console.labels import (
    LEVEL_LABELS,
    REASON_LABELS,
    SIGNAL_LABELS,
    downstream_label,
    queue_label,
    task_label,
)
from tidegate.flow.backends.base import GateSnapshot
from tidegate.flow.gate import GateState, _state
from tidegate.load.watermarks import BoardEntry
from tidegate.settings import gate_policy_from_env

__all__ = [
    "GATE_REPLIES",
    "GateRow",
    "LetterGroup",
    "Parked",
    "QueueRow",
    "gate_rows",
    "letter_groups",
    "parked",
    "queue_rows",
]

#: Replies per gate in the gates pipeline: config, pause, leases, TAT, admitted.
GATE_REPLIES = 5


@dataclass(frozen=True, slots=True)
class GateRow:
    """One downstream gate as the page shows it."""

    name: str
    label: str
    rate: float
    burst: int
    tokens: int
    concurrency: int
    leases_held: int
    paused_for_s: float
    pause_reason: str | None
    overridden: tuple[str, ...]

    @property
    def paused(self) -> bool:
        return self.paused_for_s > 0

    @classmethod
    def from_state(cls, state: GateState) -> GateRow:
        return cls(
            name=state.name,
            label=downstream_label(state.name),
            rate=state.policy.rate,
            burst=state.policy.burst,
            tokens=state.tokens_available,
            concurrency=state.policy.concurrency,
            leases_held=state.leases_held,
            paused_for_s=state.paused_for_s,
            pause_reason=state.pause_reason if state.paused_for_s > 0 else None,
            overridden=state.overridden,
        )


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def now_ms_of(time_reply: Sequence[Any]) -> float:
    """Redis ``TIME`` as ms since the epoch (the fleet clock)."""
    seconds, micros = time_reply
    return int(seconds) * 1000 + int(micros) / 1000


def gate_rows(
    names: Sequence[str], replies: Sequence[Any], *, env: Mapping[str, str] | None = None
) -> list[GateRow]:
    """Rows from ``[config, pause, leases, tat, admitted] × names + [TIME]``.

    The policy maths is the gate's own (:class:`~tidegate.flow.GateState`), fed with
    the same snapshot ``Gate.state()`` reads, so the page and ``tidegate gate show``
    never disagree. A gate's defaults come from ``TIDEGATE_<NAME>_*`` in ``env`` (this
    process's environment when ``None``): the workers' own defaults, which Redis does
    not hold — only overrides live there.
    """
    now_ms = now_ms_of(replies[-1])
    rows = []
    for index, name in enumerate(names):
        config, pause, held, tat, admitted = replies[
            index * GATE_REPLIES : (index + 1) * GATE_REPLIES
        ]
        until = pause.get(b"until_ms")
        snapshot = GateSnapshot(
            config={k.decode(): float(v) for k, v in config.items()},
            paused_until_ms=float(until) if until is not None else None,
            pause_reason=_text(pause.get(b"reason")),
            leases_held=int(held),
            tat_ms=float(tat) if tat is not None else None,
            now_ms=now_ms,
            admitted_total=int(admitted) if admitted is not None else 0,
        )
        rows.append(GateRow.from_state(_state(name, gate_policy_from_env(name, env), snapshot)))
    return rows


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue as the monitor last judged it."""

    name: str
    label: str
    depth: int
    ready: int
    unacked: int
    hwm: int
    lwm: int
    level: str
    level_label: str
    shedding: bool
    signal: str
    reason: str
    desired_workers: int
    age_s: float
    stale: bool


def queue_rows(board: Mapping[bytes, bytes], time_reply: Sequence[Any]) -> list[QueueRow]:
    """Rows from the load board's ``HGETALL`` and ``TIME``, sorted by queue name."""
    now_ms = now_ms_of(time_reply)
    rows = []
    for raw in board.values():
        entry = BoardEntry.from_json(raw, now_ms)
        rows.append(
            QueueRow(
                name=entry.state.queue,
                label=queue_label(entry.state.queue),
                depth=entry.depth.total,
                ready=entry.depth.ready,
                unacked=entry.depth.unacked,
                hwm=entry.marks.hwm,
                lwm=entry.marks.lwm,
                level=entry.state.level.value,
                level_label=LEVEL_LABELS.get(entry.state.level.value, entry.state.level.value),
                shedding=entry.state.shedding,
                signal=SIGNAL_LABELS.get(entry.state.signal.value, entry.state.signal.value),
                reason=REASON_LABELS.get(entry.state.reason, entry.state.reason.replace("_", " ")),
                desired_workers=entry.state.desired_workers,
                age_s=entry.age_s,
                stale=not entry.fresh(),
            )
        )
    return sorted(rows, key=lambda row: row.name)


@dataclass(frozen=True, slots=True)
class LetterGroup:
    """Dead letters (or quarantined documents) of one reason and one document class."""

    reason: str
    document_class: str
    count: int
    oldest_age_s: float
    in_replay: int = 0
    #: The queue the documents wait to go back to (quarantine only).
    queue: str = ""


def _class_of_letter(record: Mapping[str, Any]) -> str:
    label = task_label(str(record.get("task", "")))
    return f"{label}, per B/L" if record.get("bl_number") else label


def letter_groups(
    records: Sequence[bytes], replaying: Sequence[tuple[bytes, float]], time_reply: Sequence[Any]
) -> list[LetterGroup]:
    """Dead letters grouped by reason and class, largest group first.

    Args:
        records: the DLQ's record JSONs (``HGETALL`` values).
        replaying: ``(key, mark until ms)`` of the replay marks.
        time_reply: Redis ``TIME``.
    """
    now_ms = now_ms_of(time_reply)
    held = {key.decode() for key, until in replaying if until > now_ms}
    groups: dict[tuple[str, str], list[float | int]] = {}
    for raw in records:
        record = json.loads(raw)
        group = groups.setdefault((str(record["reason"]), _class_of_letter(record)), [0, 0.0, 0])
        group[0] += 1
        group[1] = max(group[1], now_ms / 1000 - float(record.get("first_failed_at", 0.0)))
        group[2] += record["key"] in held
    return _sorted(
        LetterGroup(reason, cls, int(n), max(0.0, float(age)), int(replay))
        for (reason, cls), (n, age, replay) in groups.items()
    )


def quarantine_groups(
    records: Mapping[bytes, bytes], since: Mapping[bytes, bytes], time_reply: Sequence[Any]
) -> list[LetterGroup]:
    """Quarantined documents grouped by reason, document class and queue, largest first
    (a class has one queue, so the queue only says where a replay sends them)."""
    now_ms = now_ms_of(time_reply)
    groups: dict[tuple[str, str, str], list[float]] = {}
    for key, raw in records.items():
        record = json.loads(raw)
        what = (str(record["reason"]), str(record["document_class"]), str(record.get("queue", "")))
        group = groups.setdefault(what, [0, 0.0])
        group[0] += 1
        group[1] = max(group[1], (now_ms - float(since.get(key, now_ms))) / 1000)
    return _sorted(
        LetterGroup(reason, cls, int(n), max(0.0, age), queue=queue)
        for (reason, cls, queue), (n, age) in groups.items()
    )


@dataclass(frozen=True, slots=True)
class Parked:
    """The parking lot: units waiting in Redis for a long gate wait or a backoff.

    Attributes:
        waiting: parked units not yet due or not yet claimed.
        moving: units a mover claimed and is republishing.
        next_due_s / last_due_s: seconds until the first and the last is due (negative:
            overdue — the mover is behind); ``None`` when nothing waits.
    """

    waiting: int
    moving: int
    next_due_s: float | None
    last_due_s: float | None


def parked(
    waiting: int,
    moving: int,
    first: Sequence[tuple[bytes, float]],
    last: Sequence[tuple[bytes, float]],
    time_reply: Sequence[Any],
) -> Parked:
    """The parking lot from its two ``ZCARD``s and the first and last due entries."""
    now_ms = now_ms_of(time_reply)
    return Parked(
        int(waiting),
        int(moving),
        (first[0][1] - now_ms) / 1000 if first else None,
        (last[0][1] - now_ms) / 1000 if last else None,
    )


def _sorted(groups: Any) -> list[LetterGroup]:
    return sorted(groups, key=lambda g: (-g.count, g.reason, g.document_class))
