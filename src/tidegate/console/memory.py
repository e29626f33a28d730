"""The console's reads held in memory: the twin of :class:`~tidegate.console.reads.RedisReads`.

The views can then be rendered and tested without Redis, with time that moves only
when told (:class:`~tidegate.flow.backends.memory.ManualClock`). It keeps the fleet's
state in the shapes Redis replies with — a gate's config and pause hashes, its lease
count and arrival time, the board's JSON, the records' JSON, ``TIME`` — and hands them
to the same pure functions (:mod:`tidegate.console.model`,
:mod:`tidegate.console.history`), so a figure computed here is computed exactly as the
page computes it from Redis. Dead letters and quarantined documents are kept without
their payload: the console never shows one, so the twin never holds one.

Thread-safe (one lock), like the flow control's memory backend.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tidegate.console.history import DEFAULT_KEEP_S, Point, point_from_replies, points_from_ring
from tidegate.console.model import (
    GateRow,
    LetterGroup,
    Parked,
    QueueRow,
    gate_rows,
    letter_groups,
    parked,
    quarantine_groups,
    queue_rows,
)
from tidegate.flow.backends.memory import ManualClock
from tidegate.load.dlq import DeadLetter
from tidegate.load.quarantine import QuarantinedDocument
from tidegate.load.watermarks import BoardEntry
from tidegate.settings import gate_policy_from_env

__all__ = ["MemoryReads"]


@dataclass
class _Gate:
    config: dict[str, float] = field(default_factory=dict)
    pause_until_ms: float | None = None
    pause_reason: str | None = None
    leases: int = 0
    tat_ms: float | None = None
    admitted: int = 0


def _bytes_map(values: Mapping[str, Any]) -> dict[bytes, bytes]:
    return {k.encode(): str(v).encode() for k, v in values.items()}


class MemoryReads:
    """The fleet's state for the console, in one process.

    Args:
        clock: the fleet clock (a :class:`ManualClock`; one starting at now by default).
        gates: gates always shown, as ``RedisReads`` takes them.
        gate_env: where the gates' defaults are read (``TIDEGATE_<NAME>_*``).
    """

    def __init__(
        self,
        *,
        clock: ManualClock | None = None,
        gates: Sequence[str] = (),
        gate_env: Mapping[str, str] | None = None,
    ) -> None:
        import time

        self.clock = clock if clock is not None else ManualClock(time.time() * 1000)
        self.gate_env = gate_env
        self._lock = threading.Lock()
        self._named = tuple(gates)
        self._gates: dict[str, _Gate] = {}
        self._board: dict[str, str] = {}
        self._letters: dict[str, str] = {}
        self._replaying: dict[str, float] = {}
        self._shed: dict[str, tuple[str, float]] = {}
        self._due: list[float] = []
        self._moving = 0
        self._ring: list[str] = []

    # -- what the fleet does --------------------------------------------------------------

    def configure_gate(
        self,
        name: str,
        *,
        rate: float | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Live overrides, as ``Gate.configure`` writes them."""
        values = {"rate": rate, "burst": burst, "concurrency": concurrency}
        with self._lock:
            gate = self._gates.setdefault(name, _Gate())
            gate.config.update({k: float(v) for k, v in values.items() if v is not None})

    def pause_gate(self, name: str, seconds: float, reason: str) -> None:
        with self._lock:
            gate = self._gates.setdefault(name, _Gate())
            gate.pause_until_ms = self.clock.now_ms() + seconds * 1000
            gate.pause_reason = reason

    def hold_leases(self, name: str, count: int) -> None:
        """``count`` calls under way through gate ``name``."""
        with self._lock:
            self._gates.setdefault(name, _Gate()).leases = count

    def admit(self, name: str, count: int = 1) -> None:
        """``count`` admissions through gate ``name`` now: its arrival time moves as the
        GCRA moves it (``max(TAT, now) + count × 1000 / rate``)."""
        with self._lock:
            gate = self._gates.setdefault(name, _Gate())
            rate = gate.config.get("rate", gate_policy_from_env(name, self.gate_env).rate)
            now = self.clock.now_ms()
            if rate > 0:
                gate.tat_ms = max(gate.tat_ms or now, now) + count * 1000.0 / rate
            gate.admitted += count

    def publish(self, entries: Iterable[BoardEntry]) -> None:
        """The monitor's board, as ``LoadBoard.publish`` writes it."""
        with self._lock:
            self._board.update({e.state.queue: e.to_json() for e in entries})

    def add_letter(self, letter: DeadLetter, *, in_replay_s: float | None = None) -> None:
        """A dead letter (its payload is dropped), optionally marked in replay."""
        now_s = self.clock.now_ms() / 1000
        stored = replace(letter, payload={}, first_failed_at=letter.first_failed_at or now_s)
        with self._lock:
            self._letters[letter.key] = stored._record()
            if in_replay_s is not None:
                self._replaying[letter.key] = self.clock.now_ms() + in_replay_s * 1000
            else:
                self._replaying.pop(letter.key, None)

    def add_quarantined(self, document: QuarantinedDocument) -> None:
        """A shed document (its payload is dropped), quarantined now."""
        record = document.summary()
        del record["quarantined_at"]
        with self._lock:
            self._shed.setdefault(document.key, (json.dumps(record), self.clock.now_ms()))

    def park(self, due_in_s: float) -> None:
        with self._lock:
            self._due.append(self.clock.now_ms() + due_in_s * 1000)
            self._due.sort()

    def sample(self) -> Point:
        """Store one chart point of the state now, as the console's sampler does."""
        names = self.gate_names()
        replies, board = self._gate_replies(names), self._board_replies()
        point = point_from_replies(names, replies, board, env=self.gate_env)
        with self._lock:
            self._ring.insert(0, point.to_json())
        return point

    # -- the reads (RedisReads' methods) --------------------------------------------------

    def _time(self) -> list[int]:
        now_ms = self.clock.now_ms()
        return [int(now_ms // 1000), round((now_ms % 1000) * 1000)]

    def _gate_replies(self, names: Sequence[str]) -> list[Any]:
        replies: list[Any] = []
        now = self.clock.now_ms()
        with self._lock:
            for name in names:
                gate = self._gates.get(name, _Gate())
                paused = gate.pause_until_ms is not None and gate.pause_until_ms > now
                pause = (
                    {"until_ms": gate.pause_until_ms, "reason": gate.pause_reason or ""}
                    if paused
                    else {}
                )
                tat = gate.tat_ms if gate.tat_ms is not None and gate.tat_ms > now else None
                replies += [
                    _bytes_map(gate.config),
                    _bytes_map(pause),
                    gate.leases,
                    None if tat is None else repr(tat).encode(),
                    str(gate.admitted).encode() if gate.admitted else None,
                ]
        replies.append(self._time())
        return replies

    def _board_replies(self) -> dict[bytes, bytes]:
        with self._lock:
            return {k.encode(): v.encode() for k, v in self._board.items()}

    def gate_names(self) -> list[str]:
        with self._lock:
            return sorted(set(self._named) | set(self._gates))

    def gates(self, names: Sequence[str]) -> list[GateRow]:
        return gate_rows(names, self._gate_replies(names), env=self.gate_env)

    def queues(self) -> list[QueueRow]:
        return queue_rows(self._board_replies(), self._time())

    def history(self, *, keep_s: float = DEFAULT_KEEP_S) -> list[Point]:
        with self._lock:
            raws = list(self._ring)
        return points_from_ring(raws, now_ms=self.clock.now_ms(), keep_s=keep_s)

    def held_back(self) -> tuple[list[LetterGroup], list[LetterGroup], Parked]:
        now = self._time()
        with self._lock:
            letters = [raw.encode() for raw in self._letters.values()]
            replaying = [(k.encode(), until) for k, until in self._replaying.items()]
            shed = {k.encode(): raw.encode() for k, (raw, _) in self._shed.items()}
            since = {k.encode(): repr(ms).encode() for k, (_, ms) in self._shed.items()}
            due = list(self._due)
            moving = self._moving
        first = [(b"", due[0])] if due else []
        last = [(b"", due[-1])] if due else []
        return (
            letter_groups(letters, replaying, now),
            quarantine_groups(shed, since, now),
            parked(len(due), moving, first, last, now),
        )
