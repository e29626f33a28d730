"""The charts: points and series (pure), the sampler's turns and ring (real Redis), the
SVG (pure), and the cost of keeping and reading the history."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tidegate.console.chart_view import CachedCharts, chart_context
from tidegate.console.charts import Line, line_chart
from tidegate.console.history import (
    Point,
    admitted_per_s,
    counted_per_s,
    gate_series,
    points_from_ring,
    queue_series,
)
from tidegate.console.reads import RedisReads
from tidegate.console.sampler import HistorySampler
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.keys import Keyspace
from tidegate.load.depth import QueueDepth
from tidegate.load.watermarks import BoardEntry, LoadBoard, LoadState, Watermarks
from tidegate.settings import GatePolicy

T0 = 1_800_000_000_000.0


def test_admitted_per_second_is_read_off_the_gates_schedule() -> None:
    """A busy gate at 10/s: its TAT moved 5 s of slots in 5 s — 10 admitted per second.
    A gate idle at the first look counts only the slots reserved beyond the second, so
    one call after a quiet spell never reads as the limit."""
    assert admitted_per_s((T0 + 300, T0), (T0 + 5300, T0 + 5000), 10.0) == pytest.approx(10.0)
    # Idle at the first look; 10 slots reserved beyond the second: 2 per second.
    assert admitted_per_s((T0 - 9000, T0), (T0 + 6000, T0 + 5000), 10.0) == pytest.approx(2.0)
    # One call at T0 + 4 s into an idle gate: its slot ended before the second look.
    assert admitted_per_s((None, T0), (T0 + 4100, T0 + 5000), 10.0) == 0.0
    assert admitted_per_s((T0 - 9000, T0), (T0 - 9000, T0 + 5000), 10.0) == 0.0
    assert admitted_per_s((None, T0), (None, T0 + 5000), 10.0) == 0.0
    assert admitted_per_s((None, T0), (T0 + 500, T0 + 5000), 0.0) is None
    assert admitted_per_s((None, T0), (T0 + 500, T0), 10.0) is None


def _points() -> list[Point]:
    return [
        Point(
            T0 + i * 5000,
            {"customs": (T0 + i * 5000 + 200, 10.0, 3, None)},
            {"edi.customs": (1000 - 100 * i, 800, 200)},
        )
        for i in range(4)
    ]


def test_series_pair_consecutive_points() -> None:
    """Three pairs of four points: three admitted/s values, each with the limit; every
    point gives a depth and its marks."""
    (gate,) = gate_series(_points())
    assert [v for _, v in gate.admitted] == pytest.approx([10.0, 10.0, 10.0])
    assert [v for _, v in gate.limit] == [10.0, 10.0, 10.0]
    (queue,) = queue_series(_points())
    assert [v for _, v in queue.depth] == [1000, 900, 800, 700]
    assert {v for _, v in queue.hwm} == {800}


def test_the_ring_is_read_oldest_first_within_the_window() -> None:
    """LPUSH leaves the newest first; a point older than the window, or unreadable, is
    dropped."""
    raws = [p.to_json() for p in reversed(_points())] + ["not json", '{"g":{}}']
    old = Point(T0 - 1_000_000, {}, {}).to_json()
    points = points_from_ring([*raws, old], now_ms=T0 + 15000, keep_s=900)
    assert [p.t_ms for p in points] == [T0, T0 + 5000, T0 + 10000, T0 + 15000]
    assert points[0].gates["customs"] == (T0 + 200, 10.0, 3, None)


def test_counted_points_chart_the_counter_and_old_points_the_estimate() -> None:
    """Issue #17: with the counter in both points the chart is its delta over the
    interval — 12 in 5 s is 2.4/s although the TAT (behind the clock: tokens to spare)
    would read 0. A pair with an old three-element point keeps the estimate; a counter
    that went backwards (key deleted) gives no value rather than a negative rate."""
    legacy = Point.from_json('{"t": %r, "g": {"customs": [null, 10.0, 3]}}' % (T0 - 5000))
    assert legacy.gates["customs"] == (None, 10.0, 3, None)
    points = [
        legacy,
        Point(T0, {"customs": (T0 - 9000, 10.0, 3, 100)}, {}),
        Point(T0 + 5000, {"customs": (T0 - 1000, 10.0, 3, 112)}, {}),
        Point(T0 + 10000, {"customs": (T0 + 9000, 10.0, 3, 5)}, {}),
    ]
    (series,) = gate_series(points)
    assert series.admitted == [(T0, 0.0), (T0 + 5000, pytest.approx(2.4))]
    assert counted_per_s((7, T0), (7, T0)) is None


def test_the_svg_draws_each_line_and_escapes_its_title() -> None:
    """One polyline per series of two points or more, a dot for a single point, and the
    title escaped (it carries labels)."""
    svg = str(
        line_chart(
            [Line([(T0, 1.0), (T0 + 5000, 3.0)], "measured"), Line([(T0, 2.0)], "limit")],
            t0_ms=T0,
            t1_ms=T0 + 5000,
            title="<customs> & co",
        )
    )
    assert svg.count("<polyline") == 1
    assert svg.count("<circle") == 1
    assert "&lt;customs&gt; &amp; co" in svg
    assert "<customs>" not in svg


def test_chart_context_labels_in_port_terms() -> None:
    """The charts name the downstream and the queue as operators say them."""
    context = chart_context(_points())
    (gate,) = context["gate_charts"]
    (queue,) = context["queue_charts"]
    assert (gate.label, gate.limit) == ("customs gateway", "limit 10/s")
    assert gate.now == pytest.approx(10.0)
    assert (queue.label, queue.now, queue.limit) == ("customs filings", 700, "marks 800 / 200")


def test_sampler_refuses_a_period_that_is_not_positive() -> None:
    with pytest.raises(ConfigurationError):
        HistorySampler(redis.Redis(), every_s=0)


def _board(client: redis.Redis, prefix: str, depth: int) -> None:
    board = LoadBoard(client, prefix=prefix)
    board.publish(
        [
            BoardEntry(
                state=LoadState("edi.customs", depth=depth),
                depth=QueueDepth("edi.customs", ready=depth, unacked=0),
                marks=Watermarks(hwm=1000, lwm=200),
                sampled_at_ms=board.now_ms(),
                interval_s=5.0,
            )
        ]
    )


@pytest.mark.redis
def test_consoles_take_turns_one_point_per_period(redis_client: redis.Redis, prefix: str) -> None:
    """Three consoles tick in the same period: one of them stores a point, the others
    store nothing — N consoles do not multiply the history's writes."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=50.0, burst=5)
    _board(redis_client, prefix, 1234)
    samplers = [
        HistorySampler(redis_client, prefix=prefix, gates=lambda: ["customs"], every_s=60)
        for _ in range(3)
    ]
    stored = [sampler.tick() for sampler in samplers]
    assert sum(point is not None for point in stored) == 1
    assert redis_client.llen(Keyspace(prefix).console_history()) == 1
    point = next(p for p in stored if p is not None)
    assert point.gates["customs"][1:] == (50.0, 5, 0)  # nothing admitted yet
    assert point.queues["edi.customs"] == (1234, 1000, 200)


@pytest.mark.redis
def test_the_ring_keeps_the_window_and_the_view_reads_admissions(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Points beyond the window's capacity are trimmed; admissions through the gate
    between two points show as admitted/s on the chart (a slow gate: its schedule stays
    ahead of the clock, so every admission is seen)."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=1.0, burst=10)
    sampler = HistorySampler(
        redis_client, prefix=prefix, gates=lambda: ["customs"], every_s=0.01, keep_s=0.03
    )
    assert sampler.capacity == 4
    stored = 0
    while stored < 6:
        redis_client.delete(Keyspace(prefix).console_turn())
        with gate.acquire():
            pass
        stored += sampler.tick() is not None
    assert redis_client.llen(Keyspace(prefix).console_history()) == 4
    reads = RedisReads(redis_client, prefix=prefix, gates=["customs"])
    points = reads.history(keep_s=3600)
    assert len(points) == 4
    (series,) = gate_series(points)
    assert len(series.admitted) == 3
    assert all(value > 0 for _, value in series.admitted)


class _Reads:
    def __init__(self) -> None:
        self.calls = 0

    def history(self) -> list[Point]:
        self.calls += 1
        return _points()


def test_many_browsers_one_read_per_half_period() -> None:
    """Every browser asks each period; the console reads the ring once per half period."""
    now = [0.0]
    reads = _Reads()
    charts = CachedCharts(reads, every_s=5.0, monotonic=lambda: now[0])
    for _ in range(10):
        charts()
    assert reads.calls == 1
    now[0] = 2.6
    charts()
    assert reads.calls == 2


def test_a_level_line_is_two_points_and_coordinates_are_whole() -> None:
    """A limit that never changed over 180 samples is drawn with its two ends; a measured
    line keeps every change — and no coordinate carries decimals (page weight)."""
    flat = [(T0 + i * 5000, 10.0) for i in range(180)]
    moving = [(T0 + i * 5000, float(i % 7)) for i in range(180)]
    svg = str(
        line_chart(
            [Line(flat, "limit"), Line(moving, "measured")],
            t0_ms=T0,
            t1_ms=T0 + 179 * 5000,
            title="t",
        )
    )
    limit, measured = (
        part.split('points="')[1].split('"')[0] for part in svg.split("<polyline")[1:]
    )
    assert limit.split() == ["0,18", "300,18"]  # 10 of a 0–11 scale over 68 units
    assert len(measured.split()) > 100
    assert "." not in limit + measured


@pytest.mark.redis
def test_a_sampler_that_loses_its_turn_costs_one_round_trip(
    counting_client: redis.Redis, round_trips: Any, prefix: str
) -> None:
    """The console that samples sends three round trips (its turn, one read pipeline, one
    write pipeline); every other console in that period sends one: its refused turn."""
    names = ["customs", "tos", "docstore"]
    first, second = (
        HistorySampler(counting_client, prefix=prefix, gates=lambda: names, every_s=60)
        for _ in range(2)
    )
    counting_client.ping()
    round_trips.reset()
    assert first.tick() is not None
    assert len(round_trips) == 3
    round_trips.reset()
    assert second.tick() is None
    assert len(round_trips) == 1


@pytest.mark.redis
def test_a_gate_with_tokens_to_spare_charts_its_true_rate(
    redis_client: redis.Redis, prefix: str
) -> None:
    """Issue #17: a gate far below its limit (1000/s, a full bucket) admits 3 permits
    costing 1 + 4 + 2 between two points; the chart shows 7 over the points' own
    interval. Read off the TAT this reads low: its slots lie behind the second look."""
    policy = GatePolicy(rate=1000.0, burst=1000)
    gate = Gate(redis_client, "customs", prefix=prefix, policy=policy)
    gate.configure(rate=1000.0, burst=1000)  # where the sampler reads the limit
    sampler = HistorySampler(redis_client, prefix=prefix, gates=lambda: ["customs"])

    def sample() -> Point:
        redis_client.delete(Keyspace(prefix).console_turn())
        point = sampler.tick()
        assert point is not None
        return point

    first = sample()
    for n in (1, 4, 2):
        with gate.acquire(n):
            pass
    second = sample()
    (series,) = gate_series([first, second])
    ((t, value),) = series.admitted
    assert t == second.t_ms
    assert value == pytest.approx(7 / ((second.t_ms - first.t_ms) / 1000.0), rel=1e-9)
