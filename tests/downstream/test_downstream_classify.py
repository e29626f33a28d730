"""classify_response and parse_retry_after: the I/O-free decision, edge by edge."""

from __future__ import annotations

import math
from email.utils import formatdate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.downstream import (
    DEFAULT_RETRY_AFTER_S,
    MAX_RETRY_AFTER_S,
    RetryAfterPolicy,
    classify_response,
    parse_retry_after,
)
from tidegate.errors import (
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds", "issue"),
    [
        ("5", 5.0, None),
        (" 7 ", 7.0, None),
        ("2.5", 2.5, None),
        ("0", 0.0, None),
        (formatdate(NOW + 30, usegmt=True), 30.0, None),
        ("Tue, 14 Nov 2023 22:13:50 +0000", 30.0, None),
        (None, None, "missing"),
        ("", None, "invalid"),
        ("soon-ish", None, "invalid"),
        ("1e3", None, "invalid"),
        ("inf", None, "invalid"),
        ("nan", None, "invalid"),
        ("+5", None, "invalid"),
        ("5 seconds", None, "invalid"),
        ("-3", None, "negative"),
        (formatdate(NOW - 60, usegmt=True), None, "negative"),
        ("86400", MAX_RETRY_AFTER_S, "clamped"),
        ("9" * 400, MAX_RETRY_AFTER_S, "clamped"),
        (formatdate(NOW + 7200, usegmt=True), MAX_RETRY_AFTER_S, "clamped"),
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None, issue: str | None) -> None:
    """Delay-seconds and HTTP-dates are read; the rest is flagged, never trusted."""
    parsed = parse_retry_after(value, now=NOW)
    assert parsed.seconds == (None if seconds is None else pytest.approx(seconds))
    assert parsed.issue == issue


def test_the_raw_value_is_kept_truncated() -> None:
    """A bad header is kept for the log line, cut to 64 characters."""
    parsed = parse_retry_after("x" * 1_000, now=NOW)
    assert parsed.raw == "x" * 64


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(st.text(max_size=80), st.floats(min_value=1.0, max_value=3_600.0))
def test_parse_retry_after_never_raises_and_stays_in_bounds(value: str, max_s: float) -> None:
    """Any header text gives None or a delay within [0, max_s]."""
    parsed = parse_retry_after(value, now=NOW, max_s=max_s)
    assert parsed.seconds is None or 0.0 <= parsed.seconds <= max_s
    assert (parsed.seconds is None) == (parsed.issue in {"missing", "invalid", "negative"})


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_ok(status: int) -> None:
    """Any 2xx is ok and carries no error."""
    outcome = classify_response("customs", status, {}, now=NOW)
    assert outcome.ok
    assert outcome.error() is None


def test_429_is_throttled_with_the_downstream_pause() -> None:
    """429 + Retry-After: 3 → throttled for 3 s; the error says so."""
    outcome = classify_response("customs", 429, {"Retry-After": "3"}, now=NOW)
    assert (outcome.kind, outcome.retry_after_s, outcome.retry_after_issue) == (
        "throttled",
        3.0,
        None,
    )
    error = outcome.error()
    assert isinstance(error, DownstreamThrottled)
    assert (error.downstream, error.retry_after, error.status) == ("customs", 3.0, 429)


@pytest.mark.parametrize(
    ("headers", "issue"),
    [({}, "missing"), ({"Retry-After": "soon"}, "invalid"), ({"Retry-After": "-1"}, "negative")],
)
def test_429_without_a_usable_retry_after_uses_the_default(
    headers: dict[str, str], issue: str
) -> None:
    """Missing, garbage or negative → the policy default, and the issue is reported."""
    outcome = classify_response("customs", 429, headers, now=NOW)
    assert (outcome.retry_after_s, outcome.retry_after_issue) == (DEFAULT_RETRY_AFTER_S, issue)
    custom = classify_response(
        "customs", 429, headers, now=NOW, policy=RetryAfterPolicy(default_s=4.0)
    )
    assert custom.retry_after_s == 4.0


def test_an_absurd_retry_after_is_clamped_to_the_policy_max() -> None:
    """A day-long pause becomes max_s."""
    policy = RetryAfterPolicy(max_s=120.0)
    outcome = classify_response("customs", 429, {"Retry-After": "86400"}, now=NOW, policy=policy)
    assert (outcome.retry_after_s, outcome.retry_after_issue) == (120.0, "clamped")


def test_headers_are_matched_case_insensitively() -> None:
    """A plain dict with a lower-case header name works like httpx.Headers."""
    outcome = classify_response("customs", 429, {"retry-after": "9"}, now=NOW)
    assert outcome.retry_after_s == 9.0


@pytest.mark.parametrize("status", [408, 425, 500, 502, 503, 504, 599])
def test_transient_statuses_are_unavailable(status: int) -> None:
    """5xx, 408 and 425 are transient: DownstreamUnavailable, retry_after when given."""
    bare = classify_response("tos", status, {}, now=NOW)
    assert (bare.kind, bare.retry_after_s, bare.retry_after_issue) == ("unavailable", None, None)
    error = bare.error()
    assert isinstance(error, DownstreamUnavailable)
    assert error.transient
    assert error.retry_after is None  # type: ignore[attr-defined]

    hinted = classify_response("tos", status, {"Retry-After": "12"}, now=NOW)
    assert hinted.retry_after_s == 12.0
    assert hinted.error().retry_after == 12.0  # type: ignore[union-attr]


def test_a_503_with_a_garbage_retry_after_is_reported_but_has_no_default() -> None:
    """A 503's bad Retry-After is flagged; the backoff decides the wait, not a default."""
    outcome = classify_response("tos", 503, {"Retry-After": "later"}, now=NOW)
    assert (outcome.retry_after_s, outcome.retry_after_issue) == (None, "invalid")


@pytest.mark.parametrize("status", [100, 301, 302, 400, 401, 403, 404, 409, 410, 413, 415, 422])
def test_other_statuses_are_rejected(status: int) -> None:
    """Everything else is about the request itself: DownstreamRejected, not transient."""
    outcome = classify_response("customs", status, {"Retry-After": "5"}, now=NOW)
    assert outcome.kind == "rejected"
    error = outcome.error()
    assert isinstance(error, DownstreamRejected)
    assert (error.status, error.transient) == (status, False)


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(st.integers(min_value=100, max_value=599))
def test_every_status_has_exactly_one_kind(status: int) -> None:
    """The classification is total and matches the documented table."""
    kind = classify_response("x", status, {}, now=NOW).kind
    expected = (
        "ok"
        if 200 <= status < 300
        else "throttled"
        if status == 429
        else "unavailable"
        if status >= 500 or status in {408, 425}
        else "rejected"
    )
    assert kind == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"default_s": 0},
        {"default_s": -1},
        {"max_s": math.inf},
        {"default_s": 10, "max_s": 5},
        {"default_s": "1"},
    ],
)
def test_a_bad_policy_is_a_configuration_error(kwargs: dict[str, Any]) -> None:
    """default_s and max_s must be finite, positive and ordered."""
    with pytest.raises(ConfigurationError):
        RetryAfterPolicy(**kwargs)
