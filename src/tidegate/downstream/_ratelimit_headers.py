"""Read a downstream's advertised quota from its rate-limit headers, without I/O.

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
from typing import TYPE_CHECKING

from tidegate.downstream._classify import header_value

__all__ = ["parse_rate_limit_headers"]

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
        limit = _number(header_value(headers, f"X-RateLimit-Limit-{suffix}"))
        if limit is not None:
            remaining = _number(header_value(headers, f"X-RateLimit-Remaining-{suffix}"))
            hints.append(_hint("x-ratelimit", limit, window, remaining, None))
    limit = _number(header_value(headers, "X-RateLimit-Limit"))
    remaining = _number(header_value(headers, "X-RateLimit-Remaining"))
    reset = _number(header_value(headers, "X-RateLimit-Reset"))
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
    policy = header_value(headers, "RateLimit-Policy")
    state = header_value(headers, "RateLimit")
    legacy = _legacy_dictionary(state)
    if legacy is not None:
        return _ietf_legacy(
            legacy.get("limit"), legacy.get("remaining"), legacy.get("reset"), policy
        )
    if state is not None or any(name for name, _, _ in _policies(policy)):
        found = _ietf(policy, state)
        if found is not None:
            return found
    limit = header_value(headers, "RateLimit-Limit")
    if limit is not None or policy is not None:
        found = _ietf_legacy(
            _number(next(iter(_split(limit or "", ",")), None)),
            _number(header_value(headers, "RateLimit-Remaining")),
            _number(header_value(headers, "RateLimit-Reset")),
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
