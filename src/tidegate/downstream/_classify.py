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

:func:`parse_rate_limit_headers` reads a downstream's advertised quota into a
:class:`~tidegate.flow.adaptive.RateLimitHint`, whichever dialect it speaks::

    RateLimit-Policy: "default";q=600;w=60     IETF httpapi draft (-08 and later)
    RateLimit: "default";r=42;t=17
    RateLimit: limit=10, remaining=4, reset=7  draft -07
    RateLimit-Limit / -Remaining / -Reset      drafts up to -06 (+ RateLimit-Policy: 10;w=1)
    X-RateLimit-Limit / -Remaining / -Reset    de facto (Reset: delta-seconds or epoch seconds)
    X-RateLimit-Limit-Minute (-Second, ...)    Kong (the window is in the name)

With several policies the most restrictive one wins; anything unreadable is ignored
(``None``), never guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Literal, TypeAlias

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
    "parse_rate_limit_headers",
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


def _header(headers: Mapping[str, str], name: str) -> str | None:
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
    parsed = parse_retry_after(_header(headers, "Retry-After"), now=now, max_s=policy.max_s)
    if throttled:
        seconds = policy.default_s if parsed.seconds is None else parsed.seconds
        return Outcome(downstream, "throttled", status, seconds, parsed.issue, parsed.raw)
    # A 503 without Retry-After is ordinary: back off, and there is nothing to report.
    issue = None if parsed.issue == "missing" else parsed.issue
    return Outcome(downstream, "unavailable", status, parsed.seconds, issue, parsed.raw)


# -- rate-limit headers -------------------------------------------------------------

if TYPE_CHECKING:
    # At run time the hint type is imported on first use: importing tidegate.flow here
    # would load redis and the gate into every process that only classifies answers.
    from tidegate.flow.adaptive._hint import HintSource, RateLimitHint

_SF_NUMBER = re.compile(r"\d{1,15}(?:\.\d{1,3})?")  # sf-integer / sf-decimal, never negative
#: ``X-RateLimit-Reset`` above this is an epoch timestamp (GitHub), not delta-seconds.
_EPOCH_THRESHOLD = 1_000_000_000
_KONG_WINDOWS = {"second": 1.0, "minute": 60.0, "hour": 3_600.0, "day": 86_400.0}
_LEGACY_KEYS = frozenset({"limit", "remaining", "reset"})


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    return float(text) if _SF_NUMBER.fullmatch(text) else None


def _split(value: str, separator: str) -> list[str]:
    """Split a structured-field value on ``separator`` outside double quotes."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in value:
        if char == '"':
            quoted = not quoted
        if char == separator and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def _member(member: str) -> tuple[str, dict[str, str]]:
    """One list member: its bare item (unquoted) and its ``;key=value`` parameters."""
    parts = _split(member, ";")
    if not parts:
        return "", {}
    head, *params = parts
    pairs = {}
    for param in params:
        key, _, value = param.partition("=")
        pairs[key.strip().lower()] = value.strip().strip('"')
    return head.strip().strip('"'), pairs


def _hint(
    source: HintSource,
    limit: float | None,
    window_s: float | None,
    remaining: float | None,
    reset_s: float | None,
) -> RateLimitHint | None:
    if window_s is not None and window_s <= 0:
        window_s = None
    if limit is None and (remaining is None or reset_s is None):
        return None
    from tidegate.flow.adaptive._hint import RateLimitHint

    return RateLimitHint(
        limit=limit, window_s=window_s, remaining=remaining, reset_s=reset_s, source=source
    )


def _strictest(hints: list[RateLimitHint | None]) -> RateLimitHint | None:
    """The hint that allows the least: an exhausted one, else the lowest safe rate."""
    usable = [h for h in hints if h is not None and (h.exhausted or h.safe_rate is not None)]
    if not usable:
        return None
    exhausted = [h for h in usable if h.exhausted]
    if exhausted:
        return max(exhausted, key=lambda h: h.reset_s or 0.0)
    return min(usable, key=lambda h: h.safe_rate or math.inf)


def _policies(value: str | None) -> list[tuple[str, float, float | None]]:
    """``RateLimit-Policy`` members as (name, quota, window_s); both draft syntaxes."""
    found = []
    for member in _split(value or "", ","):
        head, params = _member(member)
        quota = _number(params.get("q")) if "q" in params else _number(head)
        if quota is not None:
            found.append((head if "q" in params else "", quota, _number(params.get("w"))))
    return found


def _ietf(policy: str | None, state: str | None) -> RateLimitHint | None:
    """Draft -08 and later: named policies, and ``r``/``t`` per policy name."""
    states: dict[str, tuple[float | None, float | None]] = {}
    for member in _split(state or "", ","):
        name, params = _member(member)
        states[name] = (_number(params.get("r")), _number(params.get("t")))
    policies = {name: (quota, window) for name, quota, window in _policies(policy)}
    hints = []
    for name in policies.keys() | states.keys():
        quota, window = policies.get(name, (None, None))
        remaining, reset = states.get(name, (None, None))
        if remaining is None and len(states) == 1 and len(policies) == 1:
            remaining, reset = next(iter(states.values()))
        hints.append(_hint("ietf", quota, window, remaining, reset))
    return _strictest(hints)


def _ietf_legacy(
    limit: float | None, remaining: float | None, reset: float | None, policy: str | None
) -> RateLimitHint | None:
    """Drafts up to -07: one limit/remaining/reset triple, windows from the policy."""
    hints = [
        _hint("ietf-legacy", quota, window, remaining, reset)
        for _, quota, window in _policies(policy)
    ]
    if not hints or limit is not None:
        hints.append(_hint("ietf-legacy", limit, None, remaining, reset))
    return _strictest(hints)


def _x_ratelimit(headers: Mapping[str, str], now: float) -> RateLimitHint | None:
    hints = []
    for suffix, window in _KONG_WINDOWS.items():
        limit = _number(_header(headers, f"X-RateLimit-Limit-{suffix}"))
        if limit is not None:
            remaining = _number(_header(headers, f"X-RateLimit-Remaining-{suffix}"))
            hints.append(_hint("x-ratelimit", limit, window, remaining, None))
    limit = _number(_header(headers, "X-RateLimit-Limit"))
    remaining = _number(_header(headers, "X-RateLimit-Remaining"))
    reset = _number(_header(headers, "X-RateLimit-Reset"))
    if reset is not None and reset >= _EPOCH_THRESHOLD:
        reset = max(0.0, reset - now)
    hints.append(_hint("x-ratelimit", limit, None, remaining, reset))
    return _strictest(hints)


def parse_rate_limit_headers(headers: Mapping[str, str], *, now: float) -> RateLimitHint | None:
    """Read a downstream's advertised quota from its rate-limit headers; pure.

    Args:
        headers: the response headers; looked up case-insensitively.
        now: the current time as ``time.time()`` seconds (for an epoch reset).

    Returns:
        The most restrictive hint found, or ``None`` when no dialect is present or
        nothing in it is readable.

    Example::

        >>> hint = parse_rate_limit_headers(
        ...     {"RateLimit-Policy": '"default";q=600;w=60', "RateLimit": '"default";r=42;t=17'},
        ...     now=0.0,
        ... )
        >>> hint.limit, hint.window_s, hint.remaining, hint.reset_s, hint.safe_rate
        (600.0, 60.0, 42.0, 17.0, 2.4705882352941178)
    """
    policy = _header(headers, "RateLimit-Policy")
    state = _header(headers, "RateLimit")
    legacy = _legacy_dictionary(state)
    if legacy is not None:
        return _ietf_legacy(
            legacy.get("limit"), legacy.get("remaining"), legacy.get("reset"), policy
        )
    if state is not None or any(name for name, _, _ in _policies(policy)):
        found = _ietf(policy, state)
        if found is not None:
            return found
    limit = _header(headers, "RateLimit-Limit")
    if limit is not None or policy is not None:
        found = _ietf_legacy(
            _number(next(iter(_split(limit or "", ",")), None)),
            _number(_header(headers, "RateLimit-Remaining")),
            _number(_header(headers, "RateLimit-Reset")),
            policy,
        )
        if found is not None:
            return found
    return _x_ratelimit(headers, now)


def _legacy_dictionary(state: str | None) -> dict[str, float | None] | None:
    """Draft -07's ``RateLimit: limit=10, remaining=4, reset=7``, or ``None``."""
    if state is None:
        return None
    pairs = {}
    for member in _split(state, ","):
        head, _ = _member(member)
        key, sep, value = head.partition("=")
        if sep:
            pairs[key.strip().lower()] = _number(value)
    return pairs if pairs.keys() & _LEGACY_KEYS else None
