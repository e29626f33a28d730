"""The charts view: each gate's admissions against its limit, each queue's depth
against its watermarks, over the last 15 minutes. Pure: points in, SVG and labels out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from markupsafe import Markup

from tidegate.console.charts import Line, line_chart
from tidegate.console.history import Point, gate_series, queue_series
from tidegate.console.labels import downstream_label, queue_label

__all__ = ["CachedCharts", "Chart", "chart_context"]


@dataclass(frozen=True, slots=True)
class Chart:
    """One small chart and the figures printed beside it."""

    name: str
    label: str
    svg: Markup
    now: float | None
    limit: str


def _fmt(value: float) -> str:
    return f"{round(value, 1):g}"


def chart_context(points: Sequence[Point]) -> dict[str, Any]:
    """``gate_charts`` and ``queue_charts`` for ``charts.html``, and the window shown."""
    t1 = points[-1].t_ms if points else 0.0
    t0 = points[0].t_ms if points else 0.0
    gate_charts = []
    for series in gate_series(points):
        label = downstream_label(series.name)
        limit = series.limit[-1][1] if series.limit else None
        gate_charts.append(
            Chart(
                series.name,
                label,
                line_chart(
                    [Line(series.limit, "limit"), Line(series.admitted, "measured")],
                    t0_ms=t0,
                    t1_ms=t1,
                    title=f"{label}: admitted per second against its limit",
                ),
                series.last,
                f"limit {_fmt(limit)}/s" if limit is not None else "no rate limit",
            )
        )
    queue_charts = []
    for queue in queue_series(points):
        label = queue_label(queue.name)
        hwm, lwm = queue.hwm[-1][1], queue.lwm[-1][1]
        queue_charts.append(
            Chart(
                queue.name,
                label,
                line_chart(
                    [
                        Line(queue.hwm, "high"),
                        Line(queue.lwm, "low"),
                        Line(queue.depth, "measured"),
                    ],
                    t0_ms=t0,
                    t1_ms=t1,
                    title=f"{label}: documents waiting against the high and low marks",
                ),
                queue.depth[-1][1],
                f"marks {hwm:.0f} / {lwm:.0f}",
            )
        )
    return {
        "gate_charts": gate_charts,
        "queue_charts": queue_charts,
        "window_s": (t1 - t0) / 1000.0,
        "points": len(points),
    }


class _History(Protocol):
    def history(self) -> list[Point]: ...


class CachedCharts:
    """The charts' context, read at most once per half period in this process.

    Every open browser asks for the charts once per period; whatever their number,
    the console reads the ring once per half period (the points change once per
    period), so the fleet's Redis sees one round trip per console, not per browser.
    """

    def __init__(
        self,
        reads: _History,
        *,
        every_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reads = reads
        self._every_s = every_s
        self._monotonic = monotonic
        self._cached: tuple[float, dict[str, Any]] | None = None

    def __call__(self) -> dict[str, Any]:
        now = self._monotonic()
        if self._cached is not None and now - self._cached[0] < self._every_s / 2:
            return self._cached[1]
        context = chart_context(self._reads.history())
        self._cached = (now, context)
        return context
