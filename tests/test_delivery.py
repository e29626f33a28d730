"""The one decision table for failed deliveries."""

from __future__ import annotations

import random

import pytest

from tidegate.delivery import Action, RetryPolicy, fleet_now_s, judge, judge_now, verdict_for
from tidegate.errors import (
    BackendUnavailable,
    ConfigurationError,
    DownstreamRejected,
    DownstreamThrottled,
    DownstreamUnavailable,
    MalformedUnit,
    Throttled,
)
from tidegate.flow import Gate
from tidegate.flow.backends.memory import ManualClock, MemoryBackend
from tidegate.settings import GatePolicy

POLICY = RetryPolicy(
    max_attempts=3, min_horizon_s=0, backoff_base_s=1.0, backoff_cap_s=8.0, max_throttle_loops=2
)


def verdict(  # type: ignore[no-untyped-def]
    exc: BaseException, attempt: int = 0, throttles: int = 0, *, policy=POLICY, failing_for_s=0.0
):
    return verdict_for(
        exc,
        attempt=attempt,
        throttles=throttles,
        policy=policy,
        failing_for_s=failing_for_s,
        rng=random.Random(1),
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


def test_an_outage_shorter_than_the_horizon_never_dead_letters() -> None:
    """Attempts run out early (jitter drew short delays); the horizon keeps the unit."""
    policy = RetryPolicy(max_attempts=3, min_horizon_s=600, backoff_base_s=1.0, backoff_cap_s=8)
    exc = DownstreamUnavailable("customs", "503", status=503)
    for attempt, failing_for in ((2, 0.0), (2, 599.9), (9, 300.0), (50, 599.0)):
        v = verdict(exc, attempt, policy=policy, failing_for_s=failing_for)
        assert (v.action, v.attempt) == (Action.PARK, attempt + 1)
        assert 0 <= v.delay_s <= 8.0  # still backing off, capped
    # Past max_attempts the unit probes at the cap: never sooner than cap/2.
    probes = [
        verdict_for(
            exc,
            attempt=a,
            throttles=0,
            policy=policy,
            failing_for_s=1.0,
            rng=random.Random(seed),
        ).delay_s
        for a in (2, 9, 50)
        for seed in range(20)
    ]
    assert min(probes) >= 4.0
    assert max(probes) <= 8.0
    late = verdict(exc, 2, policy=policy, failing_for_s=600.0)
    assert late.action is Action.DEAD_LETTER
    assert late.reason == "retries exhausted after 3 attempts (DownstreamUnavailable)"
    # Time alone does not dead-letter either: the attempts must also be spent.
    assert verdict(exc, 0, policy=policy, failing_for_s=10_000).action is Action.PARK


def test_the_default_policy_outlasts_a_ten_minute_outage() -> None:
    assert RetryPolicy().min_horizon_s >= 600


def test_rejection_dead_letters_at_once() -> None:
    v = verdict(DownstreamRejected("tos", "HTTP 422", status=422))
    assert v.action is Action.DEAD_LETTER
    assert v.reason == "downstream rejected the document (HTTP 422)"


def test_rejection_reason_carries_the_downstreams_code() -> None:
    exc = DownstreamRejected("customs", "HTTP 400", status=400, code="truncated_message")
    assert str(exc) == "customs: HTTP 400 truncated_message"
    v = verdict(exc)
    assert v.reason == "downstream rejected the document (HTTP 400 truncated_message)"


def test_a_malformed_unit_dead_letters_with_its_problem() -> None:
    v = verdict(MalformedUnit("K-1", "envelope lacks 'body'"), attempt=0)
    assert (v.action, v.attempt) == (Action.DEAD_LETTER, 1)
    assert v.reason == "malformed unit: envelope lacks 'body'"


def test_redis_down_requeues_instead_of_losing() -> None:
    """Nothing can be parked or dead-lettered without Redis: the broker keeps it."""
    assert verdict(BackendUnavailable("down")).action is Action.REQUEUE


def test_a_bug_is_dead_lettered_not_retried_forever() -> None:
    v = verdict(KeyError("body"))
    assert v.action is Action.DEAD_LETTER
    assert v.reason == "unexpected error (KeyError)"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"min_horizon_s": -1},
        {"min_horizon_s": float("nan")},
        {"min_horizon_s": float("inf")},
        {"max_throttle_loops": -1},
    ],
)
def test_invalid_policy(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


HORIZON = RetryPolicy(max_attempts=1, min_horizon_s=600, backoff_base_s=1.0, backoff_cap_s=8)


def test_judge_stamps_the_first_failure_at_the_given_time() -> None:
    """The first failed attempt carries ``now_s`` on; a throttle (no attempt) does not."""
    outage = DownstreamUnavailable("customs", "503")
    v, first = judge(
        outage, now_s=5_000.0, first_failed_at=None, attempt=0, throttles=0, policy=POLICY
    )
    assert (v.action, first) == (Action.PARK, 5_000.0)
    v, first = judge(
        Throttled("customs", 3.0, reason="paused"),
        now_s=5_000.0,
        first_failed_at=None,
        attempt=0,
        throttles=0,
        policy=POLICY,
    )
    assert (v.action, first) == (Action.PARK, None)


def test_judge_measures_the_horizon_on_the_time_it_is_given() -> None:
    """Same unit, same attempts: 599 s after its first failure parked, 600 s dead-lettered."""
    outage = DownstreamUnavailable("customs", "503")
    early, kept = judge(
        outage, now_s=1_599.0, first_failed_at=1_000.0, attempt=3, throttles=0, policy=HORIZON
    )
    late, _ = judge(
        outage, now_s=1_600.0, first_failed_at=1_000.0, attempt=3, throttles=0, policy=HORIZON
    )
    assert (early.action, kept) == (Action.PARK, 1_000.0)
    assert late.action is Action.DEAD_LETTER


def test_fleet_now_is_the_gates_clock_not_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's wall clock is a day ahead; the horizon still reads the gate's clock."""
    import time

    clock = ManualClock(start_ms=2_000_000.0)
    gate = Gate(MemoryBackend(clock), "customs", policy=GatePolicy(rate=5, burst=1))
    monkeypatch.setattr(time, "time", lambda: 86_400.0 + 2_000.0)
    assert fleet_now_s(gate) == 2_000.0
    v, first = judge_now(
        gate,
        DownstreamUnavailable("customs", "503"),
        attempt=3,
        throttles=0,
        policy=HORIZON,
        first_failed_at=1_700.0,
    )
    assert (v.action, first) == (Action.PARK, 1_700.0)
    clock.advance(300)
    v, _ = judge_now(
        gate,
        DownstreamUnavailable("customs", "503"),
        attempt=3,
        throttles=0,
        policy=HORIZON,
        first_failed_at=1_700.0,
    )
    assert v.action is Action.DEAD_LETTER


def test_a_clock_that_cannot_be_read_requeues() -> None:
    """Redis cannot tell the time: nothing can be parked or dead-lettered, so requeue."""

    class Down(MemoryBackend):
        def snapshot(self, keys):  # type: ignore[no-untyped-def]
            raise BackendUnavailable("gate snapshot: connection refused")

    gate = Gate(Down(), "customs", policy=GatePolicy(rate=5, burst=1))
    v, first = judge_now(
        gate,
        DownstreamRejected("customs", "invalid", status=422),
        attempt=0,
        throttles=0,
        policy=POLICY,
        first_failed_at=None,
    )
    assert (v.action, v.reason, first) == (Action.REQUEUE, "redis_unavailable", None)
