"""CustomsSim: the advertised quota, the enforced token bucket, 429s and suspension."""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.errors import ConfigurationError
from tidegate.sim import CustomsSim, TokenBucket, max_in_window


def test_token_bucket_gives_the_burst_then_the_rate() -> None:
    """A full bucket of 2 gives two tokens at once, then one per 1/rate seconds."""
    bucket = TokenBucket(rate=1.0, burst=2, now=0.0)
    assert [bucket.take(0.0), bucket.take(0.0)] == [0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(1.0)
    assert bucket.take(0.4) == pytest.approx(0.6)
    assert bucket.take(1.0) == 0.0
    assert bucket.take(1.0) == pytest.approx(1.0)


def test_token_bucket_refills_only_up_to_the_burst() -> None:
    """A long idle period does not bank more than ``burst`` tokens."""
    bucket = TokenBucket(rate=10.0, burst=3, now=0.0)
    taken = [bucket.take(1_000.0) for _ in range(5)]
    assert taken[:3] == [0.0, 0.0, 0.0]
    assert all(wait > 0 for wait in taken[3:])


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(
    rate=st.floats(min_value=0.1, max_value=50.0),
    burst=st.integers(min_value=1, max_value=20),
    gaps=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=300),
)
def test_token_bucket_never_admits_more_than_burst_plus_rate_per_second(
    rate: float, burst: int, gaps: list[float]
) -> None:
    """Whatever the arrival pattern, no 1-s window holds more than burst + rate accepts."""
    bucket = TokenBucket(rate=rate, burst=burst, now=0.0)
    now, accepted = 0.0, []
    for gap in gaps:
        now += gap
        if bucket.take(now) == 0.0:
            accepted.append(now)
    assert max_in_window(accepted, 1.0) <= burst + rate + 1e-6


def test_burst_then_429_with_an_honest_retry_after(clock: Any, write: Any) -> None:
    """rate=1, burst=2: two calls pass, the third is a 429 with Retry-After: 1."""
    with CustomsSim(1.0, 2, clock=clock) as sim:
        first, second, third = (write(sim.endpoint, key=f"k{i}") for i in range(3))
        assert [first.status_code, second.status_code] == [200, 200]
        assert third.status_code == 429
        assert third.headers["Retry-After"] == "1"
        assert third.json() == {"error": "rate_limited"}

        clock.advance(0.5)
        half_way = write(sim.endpoint, key="k3")
        assert half_way.status_code == 429
        assert half_way.headers["Retry-After"] == "1"

        clock.advance(0.5)
        assert write(sim.endpoint, key="k4").status_code == 200
        stats = sim.stats()
        assert stats["accepted"] == 3
        assert stats["responses_429"] == 2


def test_retry_after_is_the_wait_rounded_up(clock: Any, write: Any) -> None:
    """One token per 5 s: Retry-After is 5, then 3 after 2.5 s (2.5 rounded up)."""
    with CustomsSim(0.2, 1, clock=clock) as sim:
        assert write(sim.endpoint, key="a").status_code == 200
        assert write(sim.endpoint, key="b").headers["Retry-After"] == "5"
        clock.advance(2.5)
        assert write(sim.endpoint, key="c").headers["Retry-After"] == "3"
        clock.advance(2.5)
        assert write(sim.endpoint, key="d").status_code == 200


def test_the_advertised_minute_quota_is_not_what_is_enforced(clock: Any, write: Any) -> None:
    """The header promises 30/min; sending 30 at once gets 2 accepted and 28 429s."""
    with CustomsSim(0.5, 2, clock=clock) as sim:
        responses = [write(sim.endpoint, key=f"k{i}") for i in range(30)]
        assert {r.headers["X-RateLimit-Limit-Minute"] for r in responses} == {"30"}
        assert [r.status_code for r in responses].count(200) == 2
        assert sim.stats()["responses_429"] == 28


def test_repeated_offences_suspend_the_caller(clock: Any, write: Any) -> None:
    """Three 429s within 10 s: 30 s of 429s whatever the bucket says, then service resumes."""
    with CustomsSim(1.0, 1, suspend_after=3, suspend_window_s=10, suspend_s=30, clock=clock) as sim:
        assert write(sim.endpoint, key="ok").status_code == 200
        offences = [write(sim.endpoint, key=f"off{i}") for i in range(3)]
        assert [r.status_code for r in offences] == [429, 429, 429]
        assert [r.json()["error"] for r in offences] == [
            "rate_limited",
            "rate_limited",
            "suspended",
        ]
        assert offences[-1].headers["Retry-After"] == "30"

        clock.advance(5)  # the bucket has refilled, the suspension has not ended
        during = write(sim.endpoint, key="during")
        assert during.status_code == 429
        assert during.headers["Retry-After"] == "25"
        stats = sim.stats()
        assert stats["suspended"] is True
        assert stats["suspensions"] == 1

        clock.advance(25)
        assert write(sim.endpoint, key="after").status_code == 200
        assert sim.stats()["suspended"] is False
        assert sim.accepted_keys() == ["ok", "after"]


def test_offences_outside_the_window_do_not_suspend(clock: Any, write: Any) -> None:
    """Two 429s 11 s apart with suspend_after=2 over 10 s: no suspension."""
    with CustomsSim(1.0, 1, suspend_after=2, suspend_window_s=10, clock=clock) as sim:
        write(sim.endpoint, key="a")
        assert write(sim.endpoint, key="b").status_code == 429
        clock.advance(11)
        assert write(sim.endpoint, key="c").status_code == 200
        late = write(sim.endpoint, key="d")
        assert late.status_code == 429
        assert late.json()["error"] == "rate_limited"
        assert late.headers["Retry-After"] == "1"
        assert sim.stats()["suspensions"] == 0


def test_retry_after_as_an_http_date(clock: Any, write: Any) -> None:
    """With retry_after_format="http-date", the date is now + the honest wait."""
    wall = 1_700_000_000.0
    sim = CustomsSim(0.5, 1, retry_after_format="http-date", clock=clock, wall_clock=lambda: wall)
    with sim:
        write(sim.endpoint, key="a")
        refused = write(sim.endpoint, key="b")
        assert refused.status_code == 429
        assert parsedate_to_datetime(refused.headers["Retry-After"]).timestamp() == wall + 2


def test_reset_refills_the_bucket_and_lifts_a_suspension(clock: Any, write: Any) -> None:
    """reset() clears counters and admission state."""
    with CustomsSim(1.0, 1, suspend_after=1, suspend_s=60, clock=clock) as sim:
        write(sim.endpoint, key="a")
        write(sim.endpoint, key="b")
        assert sim.stats()["suspended"] is True
        sim.reset()
        assert write(sim.endpoint, key="c").status_code == 200
        stats = sim.stats()
        assert (stats["accepted"], stats["responses_429"], stats["suspensions"]) == (1, 0, 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 0},
        {"rate": float("inf")},
        {"rate": 1, "burst": 0},
        {"rate": 1, "suspend_after": 0},
        {"rate": 1, "suspend_s": -1},
        {"rate": 1, "retry_after_format": "minutes"},
        {"rate": 1, "path": "/stats"},
        {"rate": 1, "path": "declarations"},
    ],
)
def test_bad_settings_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    """Nonsense settings fail at construction, as ConfigurationError (a ValueError)."""
    with pytest.raises(ConfigurationError):
        CustomsSim(**kwargs)
