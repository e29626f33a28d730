"""backoff_delay: exponential, capped, full jitter."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.downstream import backoff_delay
from tidegate.errors import ConfigurationError

bases = st.floats(min_value=1e-3, max_value=10.0)
caps = st.floats(min_value=1e-3, max_value=600.0)
attempts = st.integers(min_value=0, max_value=10_000)


class _Edge(random.Random):
    """A random source that always draws the top of the range."""

    def uniform(self, a: float, b: float) -> float:
        return b


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(attempt=attempts, base=bases, cap=caps, rng=st.randoms(use_true_random=False))
def test_the_delay_is_within_zero_and_the_capped_ceiling(
    attempt: int, base: float, cap: float, rng: random.Random
) -> None:
    """0 <= delay <= min(cap, base * 2**attempt), for any attempt (no overflow)."""
    delay = backoff_delay(attempt, base=base, cap=cap, rng=rng)
    ceiling = cap if attempt > 1_000 else min(cap, base * 2.0**attempt)
    assert 0.0 <= delay <= ceiling


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(attempt=st.integers(min_value=0, max_value=200), base=bases, cap=caps)
def test_the_ceiling_doubles_until_the_cap(attempt: int, base: float, cap: float) -> None:
    """The top of the range never shrinks with the attempt number and stops at cap."""
    edge = _Edge()
    here = backoff_delay(attempt, base=base, cap=cap, rng=edge)
    after = backoff_delay(attempt + 1, base=base, cap=cap, rng=edge)
    assert here <= after <= cap
    assert after == min(cap, 2 * here)


@settings(deadline=None)  # a noisy CI box must not fail on timing
@given(attempt=attempts, seed=st.integers())
def test_a_seeded_source_is_reproducible(attempt: int, seed: int) -> None:
    """The same seed gives the same delay: jitter is testable."""
    first = backoff_delay(attempt, base=0.5, cap=60.0, rng=random.Random(seed))
    second = backoff_delay(attempt, base=0.5, cap=60.0, rng=random.Random(seed))
    assert first == second


def test_the_jitter_spreads_the_delays() -> None:
    """Full jitter: 1,000 draws at attempt 5 cover the range rather than cluster at the top."""
    rng = random.Random(42)
    draws = [backoff_delay(5, base=0.5, cap=60.0, rng=rng) for _ in range(1_000)]
    assert min(draws) < 2.0
    assert max(draws) > 14.0
    assert all(0.0 <= d <= 16.0 for d in draws)


def test_without_an_rng_it_still_works() -> None:
    """The module's own random source is used when none is given."""
    assert 0.0 <= backoff_delay(0) <= 0.5


@pytest.mark.parametrize(
    ("attempt", "kwargs"),
    [
        (-1, {}),
        (1.5, {}),
        (True, {}),
        (0, {"base": 0}),
        (0, {"base": float("nan")}),
        (0, {"cap": -1}),
        (0, {"cap": float("inf")}),
    ],
)
def test_bad_arguments_are_configuration_errors(attempt: Any, kwargs: dict[str, Any]) -> None:
    """Negative or non-integer attempts, non-positive or infinite base/cap are refused."""
    with pytest.raises(ConfigurationError):
        backoff_delay(attempt, **kwargs)
