"""Turn a downstream's answer into a decision, without I/O.

:func:`classify_response` is shared by the sync and asyncio clients (and usable on its
own, e.g. by a Celery task that talks HTTP some other way)::

    2xx                         ok
    429                         throttled    retry_after_s always set (default when absent or bad)
    408, 425, 5xx               unavailable  retry_after_s when the header is given and sane
    other 1xx, 3xx, 4xx         rejected     unrecoverable: dead-letter, do not retry

``Retry-After`` is never trusted blindly: delay-seconds (an integer; a decimal is
tolerated) or an HTTP-date are read; missing, unreadable or negative values become
``policy.default_s`` on a 429, and values above ``policy.max_s`` are clamped. The
:class:`Outcome` says which of those happened (``retry_after_issue``) so the caller can
log it — this module does no logging and reads no clock.

The rate-limit headers a downstream advertises are read apart, by
:mod:`tidegate.downstream._ratelimit_headers`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Literal, TypeAlias

from tidegate.errors import (
    ConfigurationError,
    DownstreamError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
)

__all__ = [
    "DEFAULT_RETRY_AFTER_S",
    "MAX_RETRY_AFTER_S",
    "TRANSIENT_4XX",
    "Outcome",
    "OutcomeKind",
    "RetryAfter",
    "RetryAfterIssue",
    "RetryAfterPolicy",
    "classify_response",
    "header_value",
    "parse_retry_after",
    "unavailable",
]

#: The pause used when a 429 carries no usable ``Retry-After``, in seconds.
DEFAULT_RETRY_AFTER_S = 1.0
#: The longest pause a downstream may impose through ``Retry-After``, in seconds.
MAX_RETRY_AFTER_S = 300.0
#: 4xx statuses that are about timing, not about the request: retry them.
TRANSIENT_4XX: frozenset[int] = frozenset({408, 425})

OutcomeKind: TypeAlias = Literal["ok", "throttled", "unavailable", "rejected"]
#: Why a ``Retry-After`` was not used as sent.
RetryAfterIssue: TypeAlias = Literal["missing", "invalid", "negative", "clamped"]

_DELAY_SECONDS = re.compile(r"-?\d+(?:\.\d+)?")
# Enough of a bad header to recognise it in a log line, not enough to flood one.
_RAW_LIMIT = 64


@dataclass(frozen=True, slots=True)
class RetryAfterPolicy:
    """How far a downstream's ``Retry-After`` is believed.

    Args:
        default_s: the pause after a 429 whose ``Retry-After`` is missing, unreadable
            or negative (> 0).
        max_s: the longest pause accepted; larger values are clamped (>= default_s).
    """

    default_s: float = DEFAULT_RETRY_AFTER_S
    max_s: float = MAX_RETRY_AFTER_S

    def __post_init__(self) -> None:
        for name in ("default_s", "max_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}")
        if self.max_s < self.default_s:
            raise ConfigurationError(
                f"max_s ({self.max_s!r}) must be >= default_s ({self.default_s!r})"
            )


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """A parsed ``Retry-After``.

    Args:
        seconds: the delay to honour, within ``[0, max_s]``; ``None`` when the header
            was missing or unusable.
        issue: why the header was not used as sent, or ``None`` when it was.
        raw: the header as received (truncated), for a log line; ``None`` when absent.
    """

    seconds: float | None
    issue: RetryAfterIssue | None = None
    raw: str | None = None


def parse_retry_after(
    value: str | None, *, now: float, max_s: float = MAX_RETRY_AFTER_S
) -> RetryAfter:
    """Read a ``Retry-After`` header: delay-seconds or an HTTP-date.

    Args:
        value: the header value, or ``None`` when absent.
        now: the current time as ``time.time()`` seconds (for an HTTP-date).
        max_s: values above this are clamped to it.

    Example::

        >>> parse_retry_after("2.5", now=0.0)
        RetryAfter(seconds=2.5, issue=None, raw='2.5')
        >>> parse_retry_after("soon", now=0.0).issue
        'invalid'
    """
    if value is None:
        return RetryAfter(None, "missing")
    raw = value[:_RAW_LIMIT]
    seconds = _delay_seconds(value.strip(), now)
    if seconds is None or math.isnan(seconds):
        return RetryAfter(None, "invalid", raw)
    if seconds < 0:
        return RetryAfter(None, "negative", raw)
    if seconds > max_s:
        return RetryAfter(max_s, "clamped", raw)
    return RetryAfter(seconds, None, raw)


def _delay_seconds(text: str, now: float) -> float | None:
    """Delay-seconds or an HTTP-date as seconds from ``now``; ``None`` if neither."""
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp() - now
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one downstream answer means for the caller.

    Args:
        downstream: the downstream's name, as in the errors and log events.
        kind: ``ok``, ``throttled``, ``unavailable`` or ``rejected``.
        status: the HTTP status.
        retry_after_s: the pause to honour: always set when throttled, set when
            unavailable with a usable ``Retry-After``, else ``None``.
        retry_after_issue: why ``Retry-After`` was not used as sent (to be logged).
        retry_after_raw: the header as received (truncated), when present.
    """

    downstream: str
    kind: OutcomeKind
    status: int
    retry_after_s: float | None = None
    retry_after_issue: RetryAfterIssue | None = None
    retry_after_raw: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the downstream accepted the call."""
        return self.kind == "ok"

    def error(self) -> DownstreamError | None:
        """The error to raise for this outcome, or ``None`` when it is ``ok``.

        A ``DownstreamUnavailable`` carries ``retry_after`` (seconds or ``None``).
        """
        if self.kind == "throttled":
            assert self.retry_after_s is not None
            return DownstreamThrottled(self.downstream, self.retry_after_s, status=self.status)
        if self.kind == "unavailable":
            return unavailable(
                self.downstream,
                f"HTTP {self.status}",
                status=self.status,
                retry_after=self.retry_after_s,
            )
        if self.kind == "rejected":
            return DownstreamRejected(self.downstream, f"HTTP {self.status}", status=self.status)
        return None


def unavailable(
    downstream: str, message: str, *, status: int | None, retry_after: float | None = None
) -> DownstreamUnavailable:
    """Build a :class:`DownstreamUnavailable` that carries ``retry_after``."""
    return DownstreamUnavailable(downstream, message, status=status, retry_after=retry_after)


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    wanted = name.lower()
    for key, candidate in headers.items():
        if key.lower() == wanted:
            return candidate
    return None


def classify_response(
    downstream: str,
    status: int,
    headers: Mapping[str, str],
    *,
    now: float,
    policy: RetryAfterPolicy | None = None,
) -> Outcome:
    """Classify one answer; pure (no I/O, no clock, no logging).

    Args:
        downstream: the downstream's name, carried into the outcome and its error.
        status: the HTTP status.
        headers: the response headers; looked up case-insensitively.
        now: the current time as ``time.time()`` seconds, for an HTTP-date.
        policy: the ``Retry-After`` policy; :class:`RetryAfterPolicy` defaults.

    Example::

        >>> classify_response("customs", 429, {"Retry-After": "3"}, now=0.0)
        Outcome(downstream='customs', kind='throttled', status=429, retry_after_s=3.0, \
retry_after_issue=None, retry_after_raw='3')
    """
    policy = policy or RetryAfterPolicy()
    if 200 <= status < 300:
        return Outcome(downstream, "ok", status)
    throttled = status == 429
    if not (throttled or status in TRANSIENT_4XX or 500 <= status < 600):
        return Outcome(downstream, "rejected", status)
    parsed = parse_retry_after(header_value(headers, "Retry-After"), now=now, max_s=policy.max_s)
    if throttled:
        seconds = policy.default_s if parsed.seconds is None else parsed.seconds
        return Outcome(downstream, "throttled", status, seconds, parsed.issue, parsed.raw)
    # A 503 without Retry-After is ordinary: back off, and there is nothing to report.
    issue = None if parsed.issue == "missing" else parsed.issue
    return Outcome(downstream, "unavailable", status, parsed.seconds, issue, parsed.raw)
