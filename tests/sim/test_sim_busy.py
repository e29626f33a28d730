"""The busy-time record: a downstream says itself how long its connections served calls."""

from __future__ import annotations

from typing import Any

import pytest

from tidegate.sim import TosSim, busy_share


def test_busy_share_is_service_time_over_connections_times_the_drain() -> None:
    """Two connections over [0, 1]: one busy throughout, the other 0.9 of it."""
    assert busy_share([(0.0, 1.0), (0.0, 0.5), (0.6, 1.0)], 2) == pytest.approx(0.95)


def test_busy_share_counts_the_gaps_between_calls_but_not_before_or_after() -> None:
    """One connection, calls at [10, 11] and [12, 13]: the 1 s gap counts, the 10 s
    before the first call does not."""
    assert busy_share([(12.0, 13.0), (10.0, 11.0)], 1) == pytest.approx(2 / 3)


@pytest.mark.parametrize("intervals", [[], [(5.0, 5.0)]])
def test_busy_share_without_a_served_call_is_none(intervals: list[tuple[float, float]]) -> None:
    assert busy_share(intervals, 4) is None


def test_busy_share_needs_a_connection() -> None:
    with pytest.raises(ValueError, match="connections"):
        busy_share([(0.0, 1.0)], 0)


def test_the_tos_records_when_each_call_started_and_ended(clock: Any, write: Any) -> None:
    """Service time passes on the sim's clock: two calls of 0.5 s with 0.25 s between them
    on a one-connection TOS are busy 1.0 s of a 1.25 s drain; a refused call is not
    served."""
    origin = 1_000_000.0
    with TosSim(1, 0.5, clock=clock, wall_clock=lambda: origin, sleep=clock.advance) as tos:
        assert write(tos.endpoint, key="a").status_code == 200
        clock.advance(0.25)
        assert write(tos.endpoint, key="b").status_code == 200
        stats = tos.stats()

    flat = [t for interval in stats["service_timeline"] for t in interval]
    assert flat == pytest.approx([origin, origin + 0.5, origin + 0.75, origin + 1.25])
    assert stats["served"] == 2
    assert stats["service_s_total"] == pytest.approx(1.0)
    assert stats["busy_share"] == pytest.approx(1.0 / 1.25)


def test_reset_forgets_the_service_record(clock: Any, write: Any) -> None:
    with TosSim(2, 0.1, clock=clock, sleep=clock.advance) as tos:
        write(tos.endpoint, key="a")
        tos.reset()
        stats = tos.stats()

    assert (stats["served"], stats["busy_share"], stats["service_timeline"]) == (0, None, [])
