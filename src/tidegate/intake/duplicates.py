"""Which interchanges were accepted already: the duplicate window, and its memory twin.

An interchange is known by its UNB sender id and interchange control reference. The
store keeps one record per interchange in two states: *claimed* while one request
publishes its units (for at most ``lease_ms``), then *accepted* for the duplicate
window (default 30 days). :meth:`DuplicateStore.claim` checks and claims in one
atomic step, so of two concurrent posts of one interchange exactly one publishes.

Ordering with the acknowledgement: the record turns *accepted* only after every unit
is on the broker (:meth:`DuplicateStore.confirm`), and the CONTRL is sent after that.
A crash before the confirm leaves at most a claim, which expires; the sender, having
had no CONTRL, sends again and the units are published again. Each unit carries its
idempotency key, so the workers' ledger makes the repeat harmless downstream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tidegate.errors import ConfigurationError
from tidegate.intake.decision import Claim
from tidegate.keys import DEFAULT_PREFIX, Keyspace

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_WINDOW_MS",
    "ClaimResult",
    "DuplicateStore",
    "MemoryDuplicates",
]

#: How long a repeat of an accepted interchange is rejected as a duplicate: 30 days.
DEFAULT_WINDOW_MS = 30 * 24 * 3600 * 1000
#: How long one request's unfinished claim keeps other copies waiting (then it expires
#: so that a crashed request never blocks its sender's retry for good).
DEFAULT_LEASE_MS = 120_000


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The verdict of :meth:`DuplicateStore.claim`.

    Attributes:
        claim: new (claimed by this token), duplicate or in flight.
        accepted_at_ms: for a duplicate, when the first copy was accepted.
        lease_left_ms: for one in flight, how long the other claim may still last.
    """

    claim: Claim
    accepted_at_ms: int | None = None
    lease_left_ms: int | None = None


class DuplicateStore(Protocol):
    """The duplicate window's three atomic steps."""

    def claim(self, sender: str, control_reference: str, token: str) -> ClaimResult:
        """Check the window and, if the interchange is new, claim it for ``token``."""

    def confirm(self, sender: str, control_reference: str, token: str) -> bool:
        """Record the interchange as accepted; ``False`` if the claim had lapsed."""

    def release(self, sender: str, control_reference: str, token: str) -> bool:
        """Drop ``token``'s claim (nothing was acknowledged); ``False`` if not held."""


def check_durations(window_ms: int, lease_ms: int) -> None:
    """Refuse a window or lease that is not a positive whole number of milliseconds."""
    for name, value in (("window_ms", window_ms), ("lease_ms", lease_ms)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"{name} must be a whole number of ms >= 1, got {value!r}")


class MemoryDuplicates:
    """The in-process twin: a lock and a dict of ``key -> (state, expiry)``.

    Args:
        window_ms / lease_ms: as for the Redis store.
        prefix: key prefix (only to build the same keys).
        clock: monotonic seconds (for expiry); wall_ms: ms since epoch (for records).
    """

    def __init__(
        self,
        *,
        window_ms: int = DEFAULT_WINDOW_MS,
        lease_ms: int = DEFAULT_LEASE_MS,
        prefix: str = DEFAULT_PREFIX,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        check_durations(window_ms, lease_ms)
        self.window_ms = window_ms
        self.lease_ms = lease_ms
        self.prefix = prefix
        self._keys = Keyspace(prefix)
        self._clock = clock
        self._wall_ms = wall_ms
        self._lock = threading.Lock()
        self._records: dict[str, tuple[str, float]] = {}

    def _get(self, key: str) -> str | None:
        record = self._records.get(key)
        if record is None:
            return None
        if record[1] <= self._clock():
            del self._records[key]
            return None
        return record[0]

    def _set(self, key: str, value: str, ttl_ms: int) -> None:
        self._records[key] = (value, self._clock() + ttl_ms / 1000)

    def claim(self, sender: str, control_reference: str, token: str) -> ClaimResult:
        key = self._keys.interchange(sender, control_reference)
        with self._lock:
            current = self._get(key)
            if current is None:
                self._set(key, f"pending:{token}", self.lease_ms)
                return ClaimResult(Claim.NEW)
            if current.startswith("accepted:"):
                return ClaimResult(Claim.DUPLICATE, accepted_at_ms=int(current[9:]))
            left = round((self._records[key][1] - self._clock()) * 1000)
            return ClaimResult(Claim.IN_FLIGHT, lease_left_ms=left)

    def confirm(self, sender: str, control_reference: str, token: str) -> bool:
        key = self._keys.interchange(sender, control_reference)
        with self._lock:
            held = self._get(key) == f"pending:{token}"
            self._set(key, f"accepted:{self._wall_ms()}", self.window_ms)
            return held

    def release(self, sender: str, control_reference: str, token: str) -> bool:
        key = self._keys.interchange(sender, control_reference)
        with self._lock:
            if self._get(key) == f"pending:{token}":
                del self._records[key]
                return True
            return False
