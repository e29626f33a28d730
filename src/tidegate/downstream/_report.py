"""What a downstream client tells the adaptive controller about each call.

The controller learns from every call the fleet makes; the client is the one place
that sees them all (status, how long the answer took, the rate-limit headers). The
client hands each call to a :class:`CallObserver` — in a worker, the one that writes
it into the fleet's window in Redis — and never lets observing fail a delivery: an
observer that raises is logged once per kind of error and the call goes on.

When the gate admitted the call is not the client's to know or to pass: the observer
is called inside the gate slot held around the call, and the adaptive reporter reads
the slot's admission time there (``tidegate.flow._admitted``), so a 429 to a call
admitted before the controller's last cut is recognised as its echo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

import httpx

from tidegate.downstream._classify import Outcome
from tidegate.downstream._ratelimit_headers import parse_rate_limit_headers
from tidegate.logging import get_logger

if TYPE_CHECKING:  # not at import: a process that only classifies loads no tidegate.flow
    from tidegate.flow.adaptive._hint import RateLimitHint

__all__ = ["CallObserver", "ObservedOutcome", "observe_failure", "observe_response"]

log = get_logger("tidegate.downstream")

#: How one call ended, as the controller counts it (a 4xx rejection is not counted:
#: it says nothing about the downstream's capacity).
ObservedOutcome: TypeAlias = Literal["ok", "throttled", "unavailable"]


class CallObserver(Protocol):
    """Told about every call a downstream client made (any thread)."""

    def observe(
        self, outcome: ObservedOutcome, *, latency_ms: float | None, hint: RateLimitHint | None
    ) -> None: ...


def _latency_ms(response: httpx.Response) -> float | None:
    try:
        elapsed = response.elapsed.total_seconds() * 1000.0
    except RuntimeError:  # a response built by hand (tests) has no elapsed
        return None
    return elapsed if elapsed > 0 else None


def _safely(
    name: str,
    observer: CallObserver,
    outcome: ObservedOutcome,
    latency_ms: float | None,
    hint: RateLimitHint | None,
) -> None:
    try:
        observer.observe(outcome, latency_ms=latency_ms, hint=hint)
    except Exception as exc:  # observing must never fail a delivery
        log.warning("downstream_observe_failed", downstream=name, error=type(exc).__name__)


def observe_response(
    name: str,
    observer: CallObserver | None,
    outcome: Outcome,
    response: httpx.Response,
    *,
    now: float,
) -> None:
    """Report an answered call (not a 4xx rejection) to ``observer``."""
    if observer is None or outcome.kind == "rejected":
        return
    hint = parse_rate_limit_headers(response.headers, now=now)
    kind: ObservedOutcome = (
        "ok"
        if outcome.kind == "ok"
        else ("throttled" if outcome.kind == "throttled" else "unavailable")
    )
    _safely(name, observer, kind, _latency_ms(response), hint)


def observe_failure(name: str, observer: CallObserver | None) -> None:
    """Report a call that got no answer (refused, timed out) to ``observer``."""
    if observer is not None:
        _safely(name, observer, "unavailable", None, None)
