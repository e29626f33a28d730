"""What the fleet saw in one tick, from reports of single calls to the controller's windows.

Each worker reports each downstream call (outcome, latency, leases in flight, whether
the gate made it wait, the answer's rate-limit headers) into a shared window of
counters; the elected controller drains the window once a tick and turns it into a
:class:`~tidegate.flow.adaptive.RateWindow` and a
:class:`~tidegate.flow.adaptive.LatencyWindow`. This module holds the pure halves:
the stored field layout both stores share, and the conversion.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tidegate.errors import ConfigurationError
from tidegate.flow.adaptive._concurrency import LatencyWindow
from tidegate.flow.adaptive._hint import RateLimitHint
from tidegate.flow.adaptive._rate import RateWindow

__all__ = [
    "CallOutcome",
    "Observations",
    "check_report",
    "encode_hint",
    "observations_from_fields",
    "windows",
]

#: How one call ended, as the controller counts it.
CallOutcome: TypeAlias = Literal["ok", "throttled", "unavailable"]
_OUTCOMES: frozenset[str] = frozenset({"ok", "throttled", "unavailable"})


@dataclass(frozen=True, slots=True)
class Observations:
    """One drained window of the fleet's reports.

    Args:
        ok, throttled, unavailable: calls by outcome.
        held: calls the gate made wait for admission (demand above the live rate).
        latency_count: calls with a latency; ``latency_sum_ms`` their total.
        latency_min_ms: the fastest, ``None`` when no latency was reported.
        max_in_flight: the most leases held while a reported call ran.
        hint: the last rate-limit headers reported in the window.
        throttled_stamped: 429s reported with their admission time.
        throttled_admitted_max_ms: the latest of those admission times (fleet clock).
        unavailable_stamped, unavailable_admitted_max_ms: the same for 503s.
    """

    ok: int = 0
    throttled: int = 0
    unavailable: int = 0
    held: int = 0
    latency_count: int = 0
    latency_sum_ms: float = 0.0
    latency_min_ms: float | None = None
    max_in_flight: int = 0
    hint: RateLimitHint | None = None
    throttled_stamped: int = 0
    throttled_admitted_max_ms: float | None = None
    unavailable_stamped: int = 0
    unavailable_admitted_max_ms: float | None = None

    @property
    def calls(self) -> int:
        """Calls that reached the downstream, whatever their outcome."""
        return self.ok + self.throttled + self.unavailable


def check_report(
    outcome: str, latency_ms: float | None, in_flight: int, admitted_ms: float | None = None
) -> None:
    """Refuse a report that would poison the window (a bug in the caller)."""
    if outcome not in _OUTCOMES:
        raise ConfigurationError(f"outcome must be one of {sorted(_OUTCOMES)}, got {outcome!r}")
    if latency_ms is not None and not (math.isfinite(latency_ms) and latency_ms > 0):
        raise ConfigurationError(f"latency_ms must be a finite number > 0, got {latency_ms!r}")
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 0:
        raise ConfigurationError(f"in_flight must be an integer >= 0, got {in_flight!r}")
    if admitted_ms is not None and not (
        isinstance(admitted_ms, int | float)
        and not isinstance(admitted_ms, bool)
        and math.isfinite(admitted_ms)
    ):
        raise ConfigurationError(f"admitted_ms must be a finite number, got {admitted_ms!r}")


def encode_hint(hint: RateLimitHint | None) -> str:
    """A hint as stored in the window; ``""`` for none."""
    if hint is None:
        return ""
    return json.dumps(
        {
            "limit": hint.limit,
            "window_s": hint.window_s,
            "remaining": hint.remaining,
            "reset_s": hint.reset_s,
            "source": hint.source,
        },
        sort_keys=True,
    )


def _hint(raw: str | None) -> RateLimitHint | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return RateLimitHint(**data)
    except (ValueError, TypeError):  # ConfigurationError is a ValueError
        return None  # a hint is advice: a bad one is dropped, not fatal


def _int(fields: Mapping[str, str], name: str) -> int:
    try:
        return max(0, int(float(fields.get(name, "0"))))
    except ValueError:
        return 0


def observations_from_fields(fields: Mapping[str, str]) -> Observations:
    """Decode a drained window (the hash ``adaptive_observe.lua`` writes)."""
    try:
        total = float(fields.get("latency_sum_ms", "0"))
        low_raw = fields.get("latency_min_ms")
        low = float(low_raw) if low_raw is not None else None
    except ValueError:
        total, low = 0.0, None
    count = _int(fields, "latency_count")
    if low is not None and not (math.isfinite(low) and low > 0):
        low = None
    if not (math.isfinite(total) and total > 0) or low is None:
        count, total, low = 0, 0.0, None
    return Observations(
        ok=_int(fields, "ok"),
        throttled=_int(fields, "throttled"),
        unavailable=_int(fields, "unavailable"),
        held=_int(fields, "held"),
        latency_count=count,
        latency_sum_ms=total,
        latency_min_ms=low,
        max_in_flight=_int(fields, "max_in_flight"),
        hint=_hint(fields.get("hint")),
        throttled_stamped=_int(fields, "throttled_stamped"),
        throttled_admitted_max_ms=_float(fields.get("throttled_admitted_max_ms")),
        unavailable_stamped=_int(fields, "unavailable_stamped"),
        unavailable_admitted_max_ms=_float(fields.get("unavailable_admitted_max_ms")),
    )


def _float(raw: str | None) -> float | None:
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def windows(
    obs: Observations, *, elapsed_s: float | None, saturated: bool = False
) -> tuple[RateWindow, LatencyWindow]:
    """The controller's two windows from one drained window.

    Args:
        obs: the drained counters.
        elapsed_s: seconds the window covered; gives the rate actually sent. ``None``
            on the first tick (unknown), then no sent rate is claimed.
        saturated: the gate itself looked saturated at the tick (no tokens left,
            every lease held), in addition to calls that reported waiting.
    """
    sent = None
    if elapsed_s is not None and elapsed_s > 0 and obs.calls:
        sent = obs.calls / elapsed_s
    # The latest admission time says something only if every 429 (503) brought one:
    # an unstamped one may be fresh, and then the window is not an echo.
    stamped = obs.throttled > 0 and obs.throttled_stamped >= obs.throttled
    stamped_503 = obs.unavailable > 0 and obs.unavailable_stamped >= obs.unavailable
    rate = RateWindow(
        successes=obs.ok,
        throttled=obs.throttled,
        unavailable=obs.unavailable,
        saturated=saturated or obs.held > 0,
        sent_rate=sent,
        hint=obs.hint,
        throttled_admitted_ms=obs.throttled_admitted_max_ms if stamped else None,
        unavailable_admitted_ms=obs.unavailable_admitted_max_ms if stamped_503 else None,
    )
    if obs.latency_count and obs.latency_min_ms is not None:
        mean = max(obs.latency_sum_ms / obs.latency_count, obs.latency_min_ms)
        latency = LatencyWindow(
            samples=obs.latency_count,
            latency_ms=mean,
            min_latency_ms=obs.latency_min_ms,
            max_in_flight=obs.max_in_flight,
            rejected=obs.unavailable,
        )
    else:
        latency = LatencyWindow(max_in_flight=obs.max_in_flight, rejected=obs.unavailable)
    return rate, latency
