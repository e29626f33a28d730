"""HTTP clients for the downstreams, turning 429/503/Retry-After into gate feedback.

* :class:`DownstreamClient` / :class:`AsyncDownstreamClient` — JSON writes that always
  carry an ``Idempotency-Key``; a 429 calls ``feedback.pause`` (the fleet-wide gate) and
  raises :class:`~tidegate.errors.DownstreamThrottled`; 503, refused or timed-out calls
  raise :class:`~tidegate.errors.DownstreamUnavailable`; other 4xx raise
  :class:`~tidegate.errors.DownstreamRejected`.
* :func:`classify_response` / :func:`parse_retry_after` — the I/O-free decision both
  clients share, usable on its own.
* :func:`parse_rate_limit_headers` — a downstream's advertised quota (IETF
  ``RateLimit``/``RateLimit-Policy``, ``X-RateLimit-*``) as a typed hint for the
  adaptive rate controller.
* :func:`backoff_delay` — exponential backoff with full jitter, for task retries.
* :class:`RelayTransport` — a worker's side of the relay
  (:mod:`tidegate.downstream.relay`: lanes that own a connection-limited downstream's
  connections and pipeline the fleet's calls); an httpx transport, so the client above
  does not change.
"""

from __future__ import annotations

from tidegate.downstream._backoff import (
    DEFAULT_BACKOFF_BASE_S,
    DEFAULT_BACKOFF_CAP_S,
    backoff_delay,
)
from tidegate.downstream._classify import (
    DEFAULT_RETRY_AFTER_S,
    MAX_RETRY_AFTER_S,
    TRANSIENT_4XX,
    Outcome,
    OutcomeKind,
    RetryAfter,
    RetryAfterIssue,
    RetryAfterPolicy,
    classify_response,
    parse_retry_after,
)
from tidegate.downstream._client import (
    DEFAULT_TIMEOUT,
    IDEMPOTENCY_HEADER,
    PAUSE_REASON_HTTP_429,
    AsyncDownstreamClient,
    DownstreamClient,
    PauseFeedback,
)
from tidegate.downstream._ratelimit_headers import parse_rate_limit_headers
from tidegate.downstream._relay_transport import RelayTransport
from tidegate.downstream._report import CallObserver, ObservedOutcome

__all__ = [
    "DEFAULT_BACKOFF_BASE_S",
    "DEFAULT_BACKOFF_CAP_S",
    "DEFAULT_RETRY_AFTER_S",
    "DEFAULT_TIMEOUT",
    "IDEMPOTENCY_HEADER",
    "MAX_RETRY_AFTER_S",
    "PAUSE_REASON_HTTP_429",
    "TRANSIENT_4XX",
    "AsyncDownstreamClient",
    "CallObserver",
    "DownstreamClient",
    "ObservedOutcome",
    "Outcome",
    "OutcomeKind",
    "PauseFeedback",
    "RelayTransport",
    "RetryAfter",
    "RetryAfterIssue",
    "RetryAfterPolicy",
    "backoff_delay",
    "classify_response",
    "parse_rate_limit_headers",
    "parse_retry_after",
]
