"""Pool sizing around a downstream's limits: pure arithmetic, no clock, no I/O."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegate.errors import ConfigurationError
from tidegate.load.sizing import (
    connection_workers,
    overhead_from_busy_share,
    pool_size,
    rate_workers,
)


def test_a_pool_as_large_as_the_cap_is_enough_only_without_overhead() -> None:
    """No bookkeeping: cap workers keep cap connections busy (+1 spare). 20 ms of it on
    50 ms calls: 4 × 70 / 50 = 5.6 → 6 workers, +1."""
    assert connection_workers(4, 0.05, 0.0) == 5
    assert connection_workers(4, 0.05, 0.02) == 7
    assert connection_workers(4, 0.05, 0.02, spare=0) == 6


def test_an_exact_ratio_is_not_rounded_up_by_floating_point() -> None:
    """4 × (0.05 + 0.01) / 0.05 is 4.8000000000000001 in floats: 5, not 6."""
    assert connection_workers(4, 0.05, 0.01, spare=0) == 5
    assert connection_workers(2, 0.1, 0.1, spare=0) == 4


def test_rate_based_workers_follow_littles_law_over_the_cycle() -> None:
    assert rate_workers(10.0, 0.5, 0.0) == 5
    assert rate_workers(10.0, 0.5, 0.1) == 6
    assert rate_workers(0.1, 0.05, 0.0) == 1  # at least one


def test_the_tighter_limit_decides_and_is_named() -> None:
    """The TOS gate (1000/s, 4 connections): the connections bind. A customs gate
    (10/s, no cap): the rate binds."""
    tos = pool_size(rate=1000.0, concurrency=4, service_s=0.05, overhead_s=0.02)
    customs = pool_size(rate=10.0, concurrency=0, service_s=0.2, overhead_s=0.05)
    slow_rate = pool_size(rate=2.0, concurrency=8, service_s=0.5, overhead_s=0.0)

    assert (tos.workers, tos.basis) == (7, "connections")
    assert (customs.workers, customs.basis) == (3, "rate")
    assert (slow_rate.workers, slow_rate.basis) == (1, "rate")
    assert customs.reason == "rate: ceil(10/s × (0.2 + 0.05) s) = 3"


def test_the_overhead_is_read_back_from_a_run_with_one_worker_per_connection() -> None:
    """Busy 0.8 of the drain with 50 ms calls: each cycle had 12.5 ms of overhead; sized
    from it, the pool keeps the connections busy."""
    overhead = overhead_from_busy_share(0.8, 0.05)
    assert overhead == pytest.approx(0.0125)
    assert connection_workers(4, 0.05, overhead, spare=0) == 5  # 4 × 62.5 / 50


@given(
    cap=st.integers(1, 64),
    service=st.floats(0.001, 10.0),
    overhead=st.floats(0.0, 10.0),
)
def test_the_pool_covers_every_connection_cycle(cap: int, service: float, overhead: float) -> None:
    """Without the spare, the workers' total busy share is at least the cap; one fewer
    is below it — the figure is the smallest that keeps the connections busy."""
    workers = connection_workers(cap, service, overhead, spare=0)
    share = service / (service + overhead)  # of one worker's cycle, on a connection
    assert workers * share >= cap * (1 - 1e-9)
    assert (workers - 1) * share < cap * (1 + 1e-9)


@pytest.mark.parametrize(
    "call",
    [
        lambda: connection_workers(0, 0.05, 0.0),
        lambda: connection_workers(4, 0.0, 0.0),
        lambda: connection_workers(4, 0.05, -0.001),
        lambda: connection_workers(4, 0.05, float("nan")),
        lambda: rate_workers(0.0, 0.05, 0.0),
        lambda: pool_size(rate=0.0, concurrency=0, service_s=0.05),
        lambda: overhead_from_busy_share(0.0, 0.05),
        lambda: overhead_from_busy_share(1.2, 0.05),
    ],
)
def test_nonsense_is_a_configuration_error(call: object) -> None:
    with pytest.raises(ConfigurationError):
        call()  # type: ignore[operator]


def test_a_relay_needs_connections_times_depth_requests_outstanding() -> None:
    """Two requests on each of 4 connections (one in service, one written ahead), 20 ms
    of bookkeeping on 50-ms calls: 4 × (2 + 0.4) = 9.6 → 10 workers, + 1 spare. Depth 1
    is the per-call rule."""
    relayed = pool_size(rate=1000.0, concurrency=4, service_s=0.05, overhead_s=0.02, depth=2)

    assert (relayed.workers, relayed.basis) == (11, "connections")
    assert relayed.reason == "connections × depth: ceil(4 × (2 + 0.02 s / 0.05 s)) + 1 spare = 11"
    assert connection_workers(4, 0.05, 0.02, depth=1) == connection_workers(4, 0.05, 0.02)
    with pytest.raises(ConfigurationError, match="depth"):
        connection_workers(4, 0.05, 0.02, depth=0)
