"""The parking lot in one process: :class:`~tidegate.load.ParkingLot`'s twin.

For a single process (a script, the in-memory lifecycle engine) and as the test fake
on a manual clock. It keeps what Redis keeps — a line by due time, claims under a
lease, the envelopes as JSON — behind one lock, so it promises what the Redis lot
promises (``tests/load/stores/test_parking_behaviour.py`` runs on both); it is not
durable, which is why a fleet uses Redis.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tidegate.events import MessageParked, emit
from tidegate.load.memory._clock import wall_ms
from tidegate.load.memory._lease import lease_claim, stamp
from tidegate.load.parking import CLAIM_LEASE_MS, ParkedMessage, envelope_keys

__all__ = ["MemoryParkingLot"]


class MemoryParkingLot:
    """Parked messages in a dict, under a lock.

    Args:
        clock: ms since the epoch; ``None`` = this host's wall clock (tests pass a
            :class:`~tidegate.flow.backends.memory.ManualClock`'s ``now_ms``).
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self._now: Callable[[], float] = clock if clock is not None else wall_ms
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}
        self._inflight: dict[str, float] = {}
        self._envelopes: dict[str, str] = {}

    def park(self, envelope: Mapping[str, Any], *, delay_s: float, reason: str) -> str:
        """Store ``envelope`` until ``delay_s`` from now; return its id."""
        message_id = uuid.uuid4().hex
        body = json.dumps(dict(envelope), separators=(",", ":"))
        with self._lock:
            self._envelopes[message_id] = body
            self._due[message_id] = stamp(self._now() + max(0.0, delay_s) * 1000.0)
        emit(MessageParked(message_id, envelope.get("task"), round(delay_s, 3), reason))
        return message_id

    def claim_due(self, limit: int = 100) -> list[ParkedMessage]:
        """Claim up to ``limit`` due messages; :meth:`ack` each after republishing it."""
        with self._lock:
            _held, claimed = lease_claim(
                self._due,
                self._inflight,
                self._envelopes,
                None,
                now_ms=self._now(),
                limit=limit,
                lease_ms=CLAIM_LEASE_MS,
                pick="due",
            )
        return [ParkedMessage(member, json.loads(body)) for member, body, _ in claimed]

    def ack(self, message_id: str) -> None:
        """Forget a republished message."""
        with self._lock:
            self._inflight.pop(message_id, None)
            self._envelopes.pop(message_id, None)

    def iter_keys(self, page: int) -> Iterator[list[str]]:
        """The idempotency keys of the parked messages, ``page`` envelopes at a time."""
        with self._lock:
            bodies = list(self._envelopes.values())
        for start in range(0, len(bodies), max(1, page)):
            if keys := envelope_keys(bodies[start : start + max(1, page)]):
                yield keys

    def depth(self) -> int:
        """Messages parked or being moved (not yet republished)."""
        with self._lock:
            return len(self._envelopes)

    def next_due_in_s(self) -> float | None:
        """Seconds until the earliest parked message is due, or None."""
        with self._lock:
            if not self._due:
                return None
            first = min(self._due.values())
            now_ms = self._now()
        return max(0.0, (first - now_ms) / 1000.0)
