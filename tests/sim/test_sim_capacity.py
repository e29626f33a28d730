"""CustomsSim's capacity schedule and TosSim's latency growth beyond its capacity.

Time is a :class:`FakeClock` stepped by the test; calls "in service" are handler
threads parked in :class:`HeldSleep`. Nothing sleeps for real.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tidegate.errors import ConfigurationError
from tidegate.sim import CustomsSim, TokenBucket, TosSim

MAINTENANCE = [(300.0, 4.0), (360.0, 10.0)]


def accepted_in_one_second(sim: CustomsSim, clock: Any, write: Any, *, calls: int) -> int:
    """Spread ``calls`` evenly over the next second; return how many were accepted."""
    ok = 0
    for _ in range(calls):
        clock.advance(1.0 / calls)
        ok += write(sim.endpoint, key=f"k{clock()}").status_code == 200
    return ok


def test_the_schedule_changes_the_enforced_rate(clock: Any, write: Any) -> None:
    """10/s, then 4/s from t = 300 s for a minute, then 10/s: 20 calls a second get
    10, then 4, then 10 through."""
    with CustomsSim(10.0, 1, schedule=MAINTENANCE, clock=clock) as sim:
        before = accepted_in_one_second(sim, clock, write, calls=20)
        clock.advance(300.0 - 1.0)
        during = accepted_in_one_second(sim, clock, write, calls=20)
        assert sim.stats()["rate"] == 4.0
        clock.advance(60.0)
        after = accepted_in_one_second(sim, clock, write, calls=20)

        assert (before, during, after) == (10, 4, 10)
        assert sim.stats()["rate"] == 10.0
        assert sim.stats()["schedule"] == [[300.0, 4.0], [360.0, 10.0]]


def test_the_advertised_quota_follows_the_schedule_or_is_withheld(clock: Any, write: Any) -> None:
    """ "minute" advertises the rate in force (240/min in the dip); "none" says nothing."""
    with CustomsSim(10.0, 1, schedule=MAINTENANCE, clock=clock) as loud:
        clock.advance(310.0)
        assert write(loud.endpoint, key="a").headers["X-RateLimit-Limit-Minute"] == "240"
    with CustomsSim(10.0, 1, schedule=MAINTENANCE, quota_headers="none", clock=clock) as quiet:
        clock.advance(310.0)
        answer = write(quiet.endpoint, key="b")
        assert answer.status_code == 200
        assert not [h for h in answer.headers if h.lower().startswith("x-ratelimit")]


def test_repeated_429s_in_the_dip_still_suspend(clock: Any, write: Any) -> None:
    """A pace of one call per 150 ms passes at 10/s; kept up through the 4/s minute it
    draws 429s and gets the sender suspended."""
    with CustomsSim(
        10.0, 1, schedule=MAINTENANCE, suspend_after=3, suspend_window_s=10.0, clock=clock
    ) as sim:

        def paced(tag: str) -> list[int]:
            statuses = []
            for i in range(8):
                clock.advance(0.15)
                statuses.append(write(sim.endpoint, key=f"{tag}{i}").status_code)
            return statuses

        assert paced("before") == [200] * 8
        clock.advance(300.0)
        during = paced("dip")

        assert during.count(429) >= 3
        assert sim.stats()["suspended"] is True
        assert sim.stats()["suspensions"] == 1


def test_reset_restarts_the_schedule(clock: Any, write: Any) -> None:
    """After a reset the schedule counts from the reset: the dip is 300 s away again."""
    with CustomsSim(10.0, 1, schedule=MAINTENANCE, clock=clock) as sim:
        clock.advance(310.0)
        assert sim.stats()["rate"] == 4.0
        sim.reset()
        assert sim.stats()["rate"] == 10.0
        clock.advance(299.0)
        assert sim.stats()["rate"] == 10.0
        clock.advance(1.0)
        assert sim.stats()["rate"] == 4.0


def test_a_rate_change_keeps_the_tokens_already_earned() -> None:
    """2 tokens earned at 1/s stay in the bucket when the rate drops to 0.1/s."""
    bucket = TokenBucket(rate=1.0, burst=5, now=0.0)
    for _ in range(5):
        bucket.take(0.0)
    bucket.set_rate(0.1, now=2.0)

    assert bucket.tokens(2.0) == pytest.approx(2.0)
    assert bucket.tokens(12.0) == pytest.approx(3.0)


@pytest.mark.parametrize(
    "schedule",
    [
        [(10.0, 0.0)],
        [(10.0, -1.0)],
        [(-1.0, 5.0)],
        [(10.0, 5.0), (5.0, 4.0)],
        [(10.0, 5.0), (10.0, 4.0)],
        [(10.0,)],
        [("soon", 4.0)],
        [(float("nan"), 4.0)],
    ],
)
def test_a_nonsense_schedule_is_a_configuration_error(schedule: Any) -> None:
    """Steps are (at_s >= 0, rate > 0), in strictly increasing at_s order."""
    with pytest.raises(ConfigurationError):
        CustomsSim(10.0, schedule=schedule)


def test_unknown_quota_headers_are_a_configuration_error() -> None:
    """Only "minute" and "none" exist."""
    with pytest.raises(ConfigurationError):
        CustomsSim(10.0, quota_headers="ietf")  # type: ignore[arg-type]


def test_tos_latency_grows_beyond_its_capacity(held_sleep: Any, write: Any) -> None:
    """Capacity 2, service 100 ms: calls 1-2 take 100 ms, the 3rd 150 ms, the 4th 200 ms;
    the 6th is beyond max_connections 5 and gets 503."""
    with (
        TosSim(max_connections=5, service_s=0.1, capacity=2, sleep=held_sleep) as tos,
        ThreadPoolExecutor(5) as pool,
    ):
        futures = []
        for i in range(5):
            futures.append(pool.submit(write, tos.endpoint, key=f"c{i}"))
            held_sleep.wait_entered(1)
        refused = write(tos.endpoint, key="c5")
        held_sleep.release()
        bodies = [future.result().json() for future in futures]

        assert held_sleep.durations == pytest.approx([0.1, 0.1, 0.15, 0.2, 0.25])
        assert [body["in_service"] for body in bodies] == [1, 2, 3, 4, 5]
        assert [body["latency_s"] for body in bodies] == pytest.approx(held_sleep.durations)
        assert refused.status_code == 503
        assert tos.stats()["max_in_service_seen"] == 5
        assert tos.stats()["capacity"] == 2


def test_tos_without_a_capacity_keeps_its_flat_latency(held_sleep: Any, write: Any) -> None:
    """The default: every accepted call takes service_s, the body has no latency fields."""
    with TosSim(3, 0.2, sleep=held_sleep) as tos, ThreadPoolExecutor(3) as pool:
        futures = []
        for i in range(3):
            futures.append(pool.submit(write, tos.endpoint, key=f"f{i}"))
            held_sleep.wait_entered(1)
        held_sleep.release()
        bodies = [future.result().json() for future in futures]

        assert held_sleep.durations == [0.2, 0.2, 0.2]
        assert all("latency_s" not in body for body in bodies)
        assert tos.stats()["capacity"] is None


@pytest.mark.parametrize("capacity", [0, 5, 2.5, True])
def test_tos_capacity_outside_one_to_max_connections_is_refused(capacity: Any) -> None:
    """Capacity above the connection limit would never degrade: refused at construction."""
    with pytest.raises(ConfigurationError):
        TosSim(max_connections=4, capacity=capacity)
