"""Where the adaptive controller's memory lives, and who may write it.

One controller per downstream decides for the whole fleet; any worker can be it. The
store offers the few primitives that makes safe — a lease to elect the controller, a
read of what was learned, a write *fenced by that lease*, a bounded history of
decisions — and nothing else. Two implementations pass one behaviour suite:
:class:`~tidegate.flow.adaptive.RedisAdaptiveStore` (Lua, fleet-wide) and
:class:`MemoryAdaptiveStore` (one process, and the test fake with a manual clock).

The learned state is kept as JSON per controller (``rate``, ``concurrency``), so a
restarted fleet starts from the last learned rate instead of the floor, and an
operator can read it with ``redis-cli HGETALL``.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tidegate.errors import BackendError, ConfigurationError
from tidegate.flow.adaptive._concurrency import ConcurrencyState
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._observe import (
    CallOutcome,
    Observations,
    check_report,
    encode_hint,
    observations_from_fields,
)
from tidegate.flow.adaptive._rate import RateState
from tidegate.flow.backends.memory import ManualClock
from tidegate.keys import AdaptiveKeys

__all__ = [
    "DEFAULT_HISTORY_MAX",
    "OBS_TTL_MS",
    "WAIT_SLICE_S",
    "AdaptiveKeys",
    "AdaptiveRecord",
    "AdaptiveStore",
    "MemoryAdaptiveStore",
    "check_history_max",
    "check_ttl_ms",
    "check_wait_s",
    "decode_event",
    "decode_record",
    "encode_event",
    "encode_record",
]

#: An observation window nobody drains (no controller running) expires after this, ms.
OBS_TTL_MS = 600_000

#: The longest single blocking wait for a rejection, seconds: under the Redis client's
#: socket timeout (5 s in ``tidegate._redis``), and short enough that a stopping loop
#: is not held up for long.
WAIT_SLICE_S = 1.0

#: Decision events kept per downstream: about an hour of changes at one a second,
#: enough to explain an incident, small enough that nobody has to trim it.
DEFAULT_HISTORY_MAX = 1_000


@dataclass(frozen=True, slots=True)
class AdaptiveRecord:
    """What the fleet has learned about one downstream; ``None`` where nothing yet."""

    rate: RateState | None = None
    concurrency: ConcurrencyState | None = None


def encode_record(record: AdaptiveRecord) -> dict[str, str]:
    """The state hash's fields: one JSON document per controller that has a state."""
    fields = {}
    if record.rate is not None:
        fields["rate"] = json.dumps(record.rate.as_dict(), sort_keys=True)
    if record.concurrency is not None:
        fields["concurrency"] = json.dumps(record.concurrency.as_dict(), sort_keys=True)
    return fields


def decode_record(fields: Mapping[str, str]) -> AdaptiveRecord:
    """The inverse of :func:`encode_record`.

    Raises:
        BackendError: a field is not the JSON this module wrote (hand-edited, or from
            an incompatible version); the caller decides whether to start afresh.
    """
    try:
        rate = fields.get("rate")
        concurrency = fields.get("concurrency")
        return AdaptiveRecord(
            rate=None if rate is None else RateState.from_dict(json.loads(rate)),
            concurrency=(
                None if concurrency is None else ConcurrencyState.from_dict(json.loads(concurrency))
            ),
        )
    except (ValueError, TypeError, AttributeError) as exc:  # ConfigurationError is a ValueError
        raise BackendError(f"unreadable adaptive state: {exc}") from exc


def encode_event(event: Mapping[str, Any]) -> str:
    """One history entry as stored."""
    return json.dumps(dict(event), sort_keys=True, separators=(",", ":"))


def decode_event(raw: str | bytes) -> dict[str, Any]:
    """One history entry as read; an unreadable one is kept as ``{"unreadable": ...}``."""
    try:
        value = json.loads(raw)
    except ValueError:
        return {"unreadable": str(raw)[:64]}
    return value if isinstance(value, dict) else {"unreadable": str(raw)[:64]}


def check_history_max(history_max: int) -> int:
    """``history_max`` itself, or ConfigurationError: a history of 0 would trim to nothing."""
    if isinstance(history_max, bool) or not isinstance(history_max, int) or history_max < 1:
        raise ConfigurationError(f"history_max must be an integer >= 1, got {history_max!r}")
    return history_max


def check_ttl_ms(ttl_ms: float) -> float:
    """``ttl_ms`` itself, or ConfigurationError: 0 means "release" to the lease script."""
    if isinstance(ttl_ms, bool) or not (isinstance(ttl_ms, int | float) and 0 < ttl_ms < 1e12):
        raise ConfigurationError(f"ttl_ms must be a finite number > 0, got {ttl_ms!r}")
    return ttl_ms


def check_wait_s(timeout_s: float) -> float:
    """A wait for a rejection: a finite number of seconds >= 0."""
    if not (isinstance(timeout_s, int | float) and 0 <= timeout_s < float("inf")):
        raise ConfigurationError(f"timeout_s must be a finite number >= 0, got {timeout_s!r}")
    return float(timeout_s)


@runtime_checkable
class AdaptiveStore(Protocol):
    """The primitives the adaptive controller is built on."""

    def now_ms(self) -> float:
        """The fleet clock (Redis TIME; a manual clock in tests), ms since the epoch."""
        ...

    def elect(self, keys: AdaptiveKeys, holder: str, ttl_ms: float) -> bool:
        """Take the lease if free or expired, renew it if ``holder`` has it; True if held."""
        ...

    def resign(self, keys: AdaptiveKeys, holder: str) -> None:
        """Give the lease up now if ``holder`` has it (a clean stop)."""
        ...

    def leader(self, keys: AdaptiveKeys) -> str | None:
        """Who holds an unexpired lease now (anyone may read; for operators and tests)."""
        ...

    def load(self, keys: AdaptiveKeys) -> AdaptiveRecord:
        """What was learned so far (anyone may read)."""
        ...

    def save(
        self,
        keys: AdaptiveKeys,
        holder: str,
        record: AdaptiveRecord,
        events: Sequence[Mapping[str, Any]] = (),
        *,
        history_max: int = DEFAULT_HISTORY_MAX,
    ) -> bool:
        """Store ``record``'s states and append ``events``, only while ``holder`` holds
        an unexpired lease; False (nothing written) otherwise."""
        ...

    def history(self, keys: AdaptiveKeys, limit: int = DEFAULT_HISTORY_MAX) -> list[dict[str, Any]]:
        """The latest ``limit`` decision events, newest first."""
        ...

    def read_overrides(self, keys: AdaptiveKeys) -> dict[str, str]:
        """The operator's live overrides, as stored (strings)."""
        ...

    def observe(
        self,
        keys: AdaptiveKeys,
        outcome: CallOutcome,
        *,
        latency_ms: float | None = None,
        in_flight: int = 0,
        held: bool = False,
        hint: RateLimitHint | None = None,
        admitted_ms: float | None = None,
    ) -> None:
        """Add one call to the current window (any worker, after every call);
        ``admitted_ms`` is when its gate admitted it (fleet clock), if known."""
        ...

    def drain(self, keys: AdaptiveKeys) -> Observations:
        """Take the current window and start a new one, atomically (the controller)."""
        ...

    def wait_rejection(self, keys: AdaptiveKeys, timeout_s: float) -> bool:
        """Block until the current window holds a 429, for at most ``timeout_s`` (or
        :data:`WAIT_SLICE_S`, whichever is shorter; 0 = just look), and take the
        token; True if it does. The controller's loop waits here between ticks."""
        ...

    def write_overrides(
        self, keys: AdaptiveKeys, values: Mapping[str, str], *, clear: Sequence[str] = ()
    ) -> None:
        """Set ``values`` and remove ``clear`` in one atomic step (validate first)."""
        ...


@dataclass
class _Lease:
    holder: str
    until_ms: float


class MemoryAdaptiveStore:
    """The single-process store: the Redis store's semantics in dicts under a lock.

    Args:
        clock: a :class:`~tidegate.flow.backends.ManualClock` for tests; real time
            when omitted.
    """

    def __init__(self, clock: ManualClock | None = None) -> None:
        self._now: Callable[[], float] = (
            clock.now_ms if clock is not None else lambda: time.time() * 1000.0
        )
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {}
        self._states: dict[str, dict[str, str]] = {}
        self._history: dict[str, collections.deque[str]] = {}
        self._overrides: dict[str, dict[str, str]] = {}
        self._obs: dict[str, dict[str, str]] = {}
        self._rejected = threading.Condition(self._lock)
        self._wake: set[str] = set()

    def now_ms(self) -> float:
        return self._now()

    def _held(self, keys: AdaptiveKeys, now: float) -> _Lease | None:
        lease = self._leases.get(keys.lease)
        return lease if lease is not None and lease.until_ms >= now else None

    def elect(self, keys: AdaptiveKeys, holder: str, ttl_ms: float) -> bool:
        check_ttl_ms(ttl_ms)
        with self._lock:
            now = self._now()
            lease = self._held(keys, now)
            if lease is not None and lease.holder != holder:
                return False
            self._leases[keys.lease] = _Lease(holder, now + ttl_ms)
            return True

    def leader(self, keys: AdaptiveKeys) -> str | None:
        with self._lock:
            lease = self._held(keys, self._now())
            return None if lease is None else lease.holder

    def resign(self, keys: AdaptiveKeys, holder: str) -> None:
        with self._lock:
            lease = self._held(keys, self._now())
            if lease is not None and lease.holder == holder:
                del self._leases[keys.lease]

    def load(self, keys: AdaptiveKeys) -> AdaptiveRecord:
        with self._lock:
            fields = dict(self._states.get(keys.state, {}))
        return decode_record(fields)

    def save(
        self,
        keys: AdaptiveKeys,
        holder: str,
        record: AdaptiveRecord,
        events: Sequence[Mapping[str, Any]] = (),
        *,
        history_max: int = DEFAULT_HISTORY_MAX,
    ) -> bool:
        check_history_max(history_max)
        fields = encode_record(record)
        encoded = [encode_event(event) for event in events]
        with self._lock:
            lease = self._held(keys, self._now())
            if lease is None or lease.holder != holder:
                return False
            self._states.setdefault(keys.state, {}).update(fields)
            history = self._history.get(keys.history)
            if history is None or history.maxlen != history_max:
                history = collections.deque(history or (), maxlen=history_max)
                self._history[keys.history] = history
            history.extendleft(encoded)
            return True

    def history(self, keys: AdaptiveKeys, limit: int = DEFAULT_HISTORY_MAX) -> list[dict[str, Any]]:
        with self._lock:
            raw = list(self._history.get(keys.history, ()))[: max(0, limit)]
        return [decode_event(entry) for entry in raw]

    def read_overrides(self, keys: AdaptiveKeys) -> dict[str, str]:
        with self._lock:
            return dict(self._overrides.get(keys.policy, {}))

    def write_overrides(
        self, keys: AdaptiveKeys, values: Mapping[str, str], *, clear: Sequence[str] = ()
    ) -> None:
        with self._lock:
            current = self._overrides.setdefault(keys.policy, {})
            for name in clear:
                current.pop(name, None)
            current.update({name: str(value) for name, value in values.items()})

    def observe(
        self,
        keys: AdaptiveKeys,
        outcome: CallOutcome,
        *,
        latency_ms: float | None = None,
        in_flight: int = 0,
        held: bool = False,
        hint: RateLimitHint | None = None,
        admitted_ms: float | None = None,
    ) -> None:
        check_report(outcome, latency_ms, in_flight, admitted_ms)
        encoded = encode_hint(hint)
        with self._lock:
            window = self._obs.setdefault(keys.obs, {})

            def add(name: str, amount: float) -> None:
                window[name] = repr(float(window.get(name, "0")) + amount)

            add(outcome, 1)
            if latency_ms is not None:
                add("latency_count", 1)
                add("latency_sum_ms", latency_ms)
                low = window.get("latency_min_ms")
                if low is None or latency_ms < float(low):
                    window["latency_min_ms"] = repr(latency_ms)
            if in_flight > int(float(window.get("max_in_flight", "-1"))):
                window["max_in_flight"] = str(in_flight)
            if held:
                add("held", 1)
            if encoded:
                window["hint"] = encoded
            if outcome != "ok" and admitted_ms is not None:
                add(f"{outcome}_stamped", 1)
                latest = window.get(f"{outcome}_admitted_max_ms")
                if latest is None or admitted_ms > float(latest):
                    window[f"{outcome}_admitted_max_ms"] = repr(float(admitted_ms))
            if outcome == "throttled":
                self._wake.add(keys.wake)
                self._rejected.notify_all()

    def drain(self, keys: AdaptiveKeys) -> Observations:
        with self._lock:
            window = self._obs.pop(keys.obs, {})
            self._wake.discard(keys.wake)
        return observations_from_fields(window)

    def wait_rejection(self, keys: AdaptiveKeys, timeout_s: float) -> bool:
        wait_s = min(check_wait_s(timeout_s), WAIT_SLICE_S)
        with self._rejected:
            if wait_s > 0:
                self._rejected.wait_for(lambda: keys.wake in self._wake, timeout=wait_s)
            found = keys.wake in self._wake
            self._wake.discard(keys.wake)
            return found
