"""parse_rate_limit_headers: every dialect in use, the strictest policy, and no guessing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.downstream import parse_rate_limit_headers
from tidegate.flow.adaptive import RateLimitHint

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (  # IETF draft -08 and later: named policy, state by name
            {"RateLimit-Policy": '"default";q=600;w=60', "RateLimit": '"default";r=42;t=17'},
            RateLimitHint(limit=600, window_s=60, remaining=42, reset_s=17, source="ietf"),
        ),
        (  # a policy alone is enough for the sustained rate
            {"RateLimit-Policy": '"default";q=10;w=1'},
            RateLimitHint(limit=10, window_s=1, source="ietf"),
        ),
        (  # draft -07: a dictionary, windows from the policy
            {"RateLimit": "limit=10, remaining=4, reset=7", "RateLimit-Policy": "10;w=1"},
            RateLimitHint(limit=10, window_s=1, remaining=4, reset_s=7, source="ietf-legacy"),
        ),
        (  # drafts up to -06: three fields
            {"RateLimit-Limit": "100", "RateLimit-Remaining": "50", "RateLimit-Reset": "30"},
            RateLimitHint(limit=100, remaining=50, reset_s=30, source="ietf-legacy"),
        ),
        (  # X-RateLimit-* with delta-seconds
            {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59", "X-RateLimit-Reset": "60"},
            RateLimitHint(limit=60, remaining=59, reset_s=60, source="x-ratelimit"),
        ),
        (  # X-RateLimit-Reset as an epoch timestamp (GitHub)
            {
                "x-ratelimit-limit": "5000",
                "x-ratelimit-remaining": "4999",
                "x-ratelimit-reset": str(int(NOW) + 3_600),
            },
            RateLimitHint(limit=5000, remaining=4999, reset_s=3_600, source="x-ratelimit"),
        ),
        (  # Kong: the window is in the name (what CustomsSim sends)
            {"X-RateLimit-Limit-Minute": "600", "X-RateLimit-Remaining-Minute": "12"},
            RateLimitHint(limit=600, window_s=60, remaining=12, source="x-ratelimit"),
        ),
    ],
)
def test_each_dialect_is_read(headers: dict[str, str], expected: RateLimitHint) -> None:
    """Each dialect gives the same typed hint, header names case-insensitive."""
    assert parse_rate_limit_headers(headers, now=NOW) == expected


def test_the_strictest_of_several_policies_wins() -> None:
    """100/min with half left vs 1,000/day: the daily quota is the tighter pace."""
    hint = parse_rate_limit_headers(
        {
            "RateLimit-Policy": '"burst";q=100;w=60, "daily";q=1000;w=86400',
            "RateLimit": '"burst";r=50;t=30',
        },
        now=NOW,
    )

    assert hint is not None
    assert (hint.limit, hint.window_s) == (1000, 86400)


def test_an_exhausted_policy_wins_over_any_rate() -> None:
    """Nothing left in one policy: the hint says wait, whatever the other allows."""
    hint = parse_rate_limit_headers(
        {
            "RateLimit-Policy": '"second";q=10;w=1, "hour";q=100;w=3600',
            "RateLimit": '"second";r=8;t=1, "hour";r=0;t=1200',
        },
        now=NOW,
    )

    assert hint is not None
    assert hint.exhausted
    assert hint.reset_s == 1200


def test_the_safe_rate_slows_down_when_a_window_was_spent_early() -> None:
    """600/min, 30 left, 20 s to the reset: 1.5/s, not the 10/s sustained pace."""
    hint = parse_rate_limit_headers(
        {"RateLimit-Policy": '"m";q=600;w=60', "RateLimit": '"m";r=30;t=20'}, now=NOW
    )

    assert hint is not None
    assert hint.sustained_rate == 10.0
    assert hint.safe_rate == 1.5


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Retry-After": "3"},
        {"RateLimit-Policy": '"default";w=60'},  # no quota
        {"RateLimit": "limit=ten, remaining=x"},
        {"X-RateLimit-Limit": "-5"},
        {"X-RateLimit-Limit": "1e9"},
        {"X-RateLimit-Remaining": "3"},  # remaining without reset or limit: no pace
        {"RateLimit-Policy": '"default";q=10;w=0'},  # a zero window is no window
        {"RateLimit-Limit": " "},  # blank: found by the fuzz test below (IndexError)
        {"RateLimit": ";"},
        {"RateLimit-Policy": ";;, ;"},
    ],
)
def test_unreadable_headers_give_no_hint(headers: dict[str, str]) -> None:
    """Nothing usable is ignored, never guessed."""
    hint = parse_rate_limit_headers(headers, now=NOW)
    assert hint is None or (hint.safe_rate is None and not hint.exhausted)


header_names = st.sampled_from(
    [
        "RateLimit",
        "RateLimit-Policy",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "X-RateLimit-Limit-Minute",
    ]
)
header_values = st.one_of(
    st.text(max_size=40),
    st.from_regex(r'"?[a-z]{0,5}"?(;[qwrt]=-?[0-9]{0,12}(\.[0-9]{0,4})?){0,3}', fullmatch=True),
    st.from_regex(r"(limit|remaining|reset)=[0-9]{0,10}(, *(remaining|reset)=[0-9]{0,6})?"),
)


@given(st.dictionaries(header_names, header_values, max_size=6))
@settings(max_examples=500, deadline=None)
def test_any_header_text_gives_none_or_a_valid_hint(headers: dict[str, str]) -> None:
    """Whatever a downstream sends: no exception, and any hint is finite and non-negative."""
    hint = parse_rate_limit_headers(headers, now=NOW)
    if hint is not None:
        safe = hint.safe_rate
        assert safe is None or safe > 0
        assert hint.window_s is None or hint.window_s > 0


def test_importing_the_downstream_package_does_not_load_the_gate() -> None:
    """The hint type is imported on first parse: a process that only classifies answers
    does not load tidegate.flow (and with it redis and the settings)."""
    import subprocess
    import sys

    code = "import sys, tidegate.downstream; print('tidegate.flow' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert out.stdout.strip() == "False"
