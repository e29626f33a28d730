"""RateLimiter behaviour, identical on the memory backend and on real Redis + Lua."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from tidegate.errors import Throttled
from tidegate.flow import RateLimiter
from tidegate.flow.backends import ManualClock


def test_fresh_bucket_admits_burst_then_refuses(make: Callable[..., Any]) -> None:
    """A full bucket gives exactly `burst` tokens back to back, then says how long to wait."""
    limiter = make(RateLimiter, "customs", rate=2.0, burst=3)

    decisions = [limiter.try_acquire() for _ in range(4)]

    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions[:3]] == [2, 1, 0]
    assert decisions[3].reason == "rate"
    assert decisions[3].wait_s == pytest.approx(0.5, abs=1e-3)


def test_refusal_consumes_nothing(make: Callable[..., Any], clock: ManualClock) -> None:
    """Hammering a refused limiter does not push the next admission further away."""
    limiter = make(RateLimiter, "tos", rate=1.0, burst=1)
    assert limiter.try_acquire().allowed

    refusals = [limiter.try_acquire() for _ in range(50)]
    clock.advance(refusals[0].wait_s)

    assert not any(d.allowed for d in refusals)
    assert limiter.try_acquire().allowed


def test_acquire_reserves_the_earliest_slot_and_sleeps_exactly(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """Each acquire past the burst waits one emission interval more than the one before it."""
    limiter = make(RateLimiter, "customs", rate=10.0, burst=2)
    start = clock.now_ms()

    waits = [limiter.acquire(max_wait=5) for _ in range(5)]

    # Reservations are queued: the 3rd..5th calls each take the next 100 ms slot.
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] == pytest.approx(0.1, abs=1e-3)
    assert (clock.now_ms() - start) / 1000 == pytest.approx(0.3, abs=1e-3)


def test_acquire_beyond_max_wait_raises_and_consumes_nothing(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """A slot further than max_wait is refused with its wait; the bucket is unchanged."""
    limiter = make(RateLimiter, "customs", rate=0.5, burst=1)
    limiter.acquire(max_wait=0)

    with pytest.raises(Throttled) as info:
        limiter.acquire(max_wait=1.0)

    assert info.value.wait_s == pytest.approx(2.0, abs=1e-3)
    assert info.value.reason == "rate"
    clock.advance(2.0)
    assert limiter.try_acquire().allowed


def test_cost_takes_several_tokens(make: Callable[..., Any]) -> None:
    """A request of n tokens is admitted only when n tokens are there."""
    limiter = make(RateLimiter, "db", rate=1.0, burst=5)

    assert limiter.try_acquire(4).allowed
    refused = limiter.try_acquire(2)

    assert not refused.allowed
    assert refused.remaining == 1
    assert refused.wait_s == pytest.approx(1.0, abs=1e-3)


def test_bucket_refills_to_burst_and_no_further(
    make: Callable[..., Any], clock: ManualClock
) -> None:
    """After a long idle period the bucket holds `burst` tokens, not rate × idle time."""
    limiter = make(RateLimiter, "customs", rate=5.0, burst=2)
    limiter.try_acquire(2)
    clock.advance(3600)

    allowed = sum(limiter.try_acquire().allowed for _ in range(10))

    assert allowed == 2


def test_two_limiters_with_the_same_name_share_one_bucket(backend: Any, prefix: str) -> None:
    """The point of the gate: two processes' limiters are one limit when names match."""
    a = RateLimiter(backend, "customs", rate=1.0, burst=2, prefix=prefix)
    b = RateLimiter(backend, "customs", rate=1.0, burst=2, prefix=prefix)
    other = RateLimiter(backend, "tos", rate=1.0, burst=2, prefix=prefix)

    assert a.try_acquire().allowed
    assert b.try_acquire().allowed
    assert not a.try_acquire().allowed
    assert other.try_acquire().allowed


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"rate": 0, "burst": 1}, "rate"),
        ({"rate": -1.0, "burst": 1}, "rate"),
        ({"rate": math.nan, "burst": 1}, "nan"),
        ({"rate": math.inf, "burst": 1}, "inf"),
        ({"rate": 1.0, "burst": 0}, "burst"),
        ({"rate": 1.0, "burst": 1.5}, "1.5"),
    ],
)
def test_invalid_configuration_is_a_value_error_naming_the_value(
    kwargs: dict[str, Any], needle: str
) -> None:
    """Bad rate/burst fail at construction with a ValueError that names the value."""
    with pytest.raises(ValueError, match=needle):
        RateLimiter("memory://", "customs", **kwargs)


@pytest.mark.parametrize("n", [0, -1, 3, 1.0, True])
def test_invalid_cost_is_a_value_error(make: Callable[..., Any], n: Any) -> None:
    """n < 1, non-integers and n > burst can never be admitted: refuse them loudly."""
    limiter = make(RateLimiter, "customs", rate=1.0, burst=2)

    with pytest.raises(ValueError, match="n"):
        limiter.try_acquire(n)


@pytest.mark.parametrize("max_wait", [-1.0, math.nan, math.inf])
def test_invalid_max_wait_is_a_value_error(make: Callable[..., Any], max_wait: float) -> None:
    """A negative or non-finite wait budget is a caller bug, not a long wait."""
    limiter = make(RateLimiter, "customs", rate=1.0, burst=1)

    with pytest.raises(ValueError, match="max_wait"):
        limiter.acquire(max_wait=max_wait)


@pytest.mark.parametrize("rate", [195.25, 3.0, 34.0, 7.3])
def test_full_burst_at_one_instant_survives_float_rounding(
    make: Callable[..., Any], rate: float
) -> None:
    """Regression: float rounding at epoch-ms magnitudes refused the 2nd of a burst of 2."""
    limiter = make(RateLimiter, "customs", rate=rate, burst=2)

    assert [limiter.try_acquire().allowed for _ in range(3)] == [True, True, False]
