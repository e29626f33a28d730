"""The delivery ledger in one process: :class:`~tidegate.load.protocols.LedgerStore` in a
dict, entries expiring on the injected clock.

It keeps the Redis store's stored forms (:func:`~tidegate.load.ledger.parse_entry`), so
the two cannot disagree on what "sending without a time" means. It never restarts, so
it is never in doubt: :attr:`~tidegate.load.ledger.LedgerEntry.in_doubt` is always
``False`` (the Redis store's first sight of a server is not a restart either).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tidegate.errors import ConfigurationError
from tidegate.load.ledger import (
    DEFAULT_LEDGER_TTL_S,
    DeliveryState,
    LedgerEntry,
    parse_entry,
)
from tidegate.load.memory._clock import wall_ms

__all__ = ["MemoryLedger"]

_DELIVERED = "1"


class MemoryLedger:
    """Per-downstream delivery state of each idempotency key, in this process.

    Args:
        ttl_s: how long an entry is remembered after its last write, on ``clock``.
        clock: ms since the epoch (a ``ManualClock``'s ``now_ms`` in tests); the
            wall clock when omitted.
    """

    def __init__(
        self,
        *,
        ttl_s: int = DEFAULT_LEDGER_TTL_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if isinstance(ttl_s, bool) or not (isinstance(ttl_s, int) and ttl_s >= 1):
            raise ConfigurationError(f"ttl_s must be a whole number >= 1, got {ttl_s!r}")
        self.ttl_s = ttl_s
        self._now = clock if clock is not None else wall_ms
        self._entries: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def _get(self, downstream: str, key: str, now: float) -> str | None:
        """The live stored form (lock held); an expired entry is dropped, as Redis would."""
        found = self._entries.get((downstream, key))
        if found is None:
            return None
        value, expires_at = found
        if now >= expires_at:
            del self._entries[(downstream, key)]
            return None
        return value

    def _set(self, downstream: str, key: str, value: str, now: float) -> None:
        self._entries[(downstream, key)] = (value, now + self.ttl_s * 1000.0)

    def state(self, downstream: str, key: str) -> DeliveryState:
        """Where ``key`` stands with ``downstream``."""
        return self.entry(downstream, key).state

    def entry(self, downstream: str, key: str) -> LedgerEntry:
        """``key``'s record and the clock, read together; never in doubt."""
        with self._lock:
            now = float(self._now())
            state, sent_at = parse_entry(self._get(downstream, key, now))
        return LedgerEntry(state, sent_at, now, False)

    def delivered(self, downstream: str, key: str) -> bool:
        """Whether ``downstream`` already accepted ``key``."""
        return self.state(downstream, key) is DeliveryState.DELIVERED

    def sending(self, downstream: str, key: str) -> float | None:
        """Record that ``key`` is about to be sent, now; ``None`` (and nothing written)
        when the entry already says delivered."""
        with self._lock:
            now = float(self._now())
            return self._sending(downstream, key, now, now)

    def _sending(self, downstream: str, key: str, at: float, now: float) -> float | None:
        if self._get(downstream, key, now) == _DELIVERED:
            return None
        self._set(downstream, key, f"s:{at:.3f}", now)
        return float(f"{at:.3f}")

    def refused(self, downstream: str, key: str) -> None:
        """The attempt was refused outright: ``sending`` with time 0, delivered spared."""
        with self._lock:
            self._sending(downstream, key, 0.0, float(self._now()))

    def mark(self, downstream: str, key: str) -> None:
        """Record that ``downstream`` accepted ``key``."""
        with self._lock:
            self._set(downstream, key, _DELIVERED, float(self._now()))

    def expires_in_s(self, downstream: str, key: str) -> float | None:
        """Seconds until ``key``'s entry is forgotten (``None``: no entry), like Redis
        ``TTL``: what the behaviour suite reads to hold both stores to ``ttl_s``."""
        with self._lock:
            now = float(self._now())
            if self._get(downstream, key, now) is None:
                return None
            return (self._entries[(downstream, key)][1] - now) / 1000.0
