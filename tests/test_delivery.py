"""The one decision table for failed deliveries."""

from __future__ import annotations

import random

import pytest

from tidegate.delivery import Action, RetryPolicy, verdict_for
from tidegate.errors import (
    BackendUnavailable,
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
    Throttled,
)

POLICY = RetryPolicy(max_attempts=3, backoff_base_s=1.0, backoff_cap_s=8.0, max_throttle_loops=2)


def verdict(exc: BaseException, attempt: int = 0, throttles: int = 0):  # type: ignore[no-untyped-def]
    return verdict_for(
        exc, attempt=attempt, throttles=throttles, policy=POLICY, rng=random.Random(1)
    )


def test_gate_throttle_parks_without_spending_an_attempt() -> None:
    """Waiting for the gate is not a failure: the attempt count is unchanged."""
    v = verdict(Throttled("customs", 40.0, reason="paused"), attempt=2)
    assert v.action is Action.PARK
    assert v.attempt == 2
    assert 40.0 <= v.delay_s <= 41.0
    assert v.reason == "gate_paused"


def test_429_is_absorbed_in_place_then_parked() -> None:
    """The client already paused the fleet; retrying in place waits the pause out."""
    exc = DownstreamThrottled("customs", 5.0)
    assert verdict(exc, throttles=0).action is Action.RETRY_IN_PLACE
    assert verdict(exc, throttles=1).action is Action.RETRY_IN_PLACE
    parked = verdict(exc, throttles=2)
    assert parked.action is Action.PARK
    assert parked.delay_s >= 5.0


def test_unavailable_backs_off_then_dead_letters_when_exhausted() -> None:
    """Transient failures spend attempts; the last one dead-letters with the count."""
    exc = DownstreamUnavailable("tos", "503", status=503)
    first, second, last = verdict(exc, 0), verdict(exc, 1), verdict(exc, 2)
    assert (first.action, first.attempt) == (Action.PARK, 1)
    assert 0 <= first.delay_s <= 1.0
    assert (second.action, second.attempt) == (Action.PARK, 2)
    assert 0 <= second.delay_s <= 2.0
    assert last.action is Action.DEAD_LETTER
    assert last.reason == "retries exhausted after 3 attempts (DownstreamUnavailable)"


def test_rejection_dead_letters_at_once() -> None:
    v = verdict(DownstreamRejected("tos", "HTTP 422", status=422))
    assert v.action is Action.DEAD_LETTER
    assert v.reason == "downstream rejected the document (HTTP 422)"


def test_redis_down_requeues_instead_of_losing() -> None:
    """Nothing can be parked or dead-lettered without Redis: the broker keeps it."""
    assert verdict(BackendUnavailable("down")).action is Action.REQUEUE


def test_a_bug_is_dead_lettered_not_retried_forever() -> None:
    v = verdict(KeyError("body"))
    assert v.action is Action.DEAD_LETTER
    assert v.reason == "unexpected error (KeyError)"


def test_invalid_policy() -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(max_attempts=0)
