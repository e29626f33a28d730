"""The last 15 minutes, as points and as chart series: pure functions, no I/O.

One *point* is what the console's sampler (:mod:`tidegate.console.sampler`) saw at
one instant, stored as compact JSON in a bounded Redis list::

    {"t": 1764630000123.4,                          # Redis TIME, ms since the epoch
     "g": {"customs": [tat_ms or null, rate, burst, admitted or null]},
     "q": {"edi.customs": [depth, hwm, lwm]}}

Admissions per second are counted, not guessed: the gate's script adds each admitted
request's cost to a per-gate counter in the same call (``gate_acquire.lua``, KEYS[5];
no extra round trip), reserved future slots included, refusals not. Between two
points the chart shows ``(admitted₂ − admitted₁) / (t₂ − t₁)`` — exact whether the
gate is at its limit or has tokens to spare.

Points written before the counter existed (three-element gate entries) — or a pair
across which the counter went backwards (its key was deleted) — fall back to the old
estimate read off the gate's schedule, :func:`admitted_per_s`: every admission moves the
GCRA theoretical arrival time (TAT) on by ``1000 / rate`` ms from ``max(TAT, now)``, so
``(TAT₂ − TAT₁) / (1000 / rate)`` when busy at the first look, and only the slots
reserved beyond the second look, ``(TAT₂ − t₂) / (1000 / rate)``, when idle — low,
down to zero, whenever the gate has tokens to spare. That fallback only lasts until the
ring has turned over once (15 minutes after the upgrade).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidegate.console.model import GATE_REPLIES, gate_rows, now_ms_of
from tidegate.load.watermarks import BoardEntry

__all__ = [
    "DEFAULT_KEEP_S",
    "GateSeries",
    "Point",
    "QueueSeries",
    "admitted_per_s",
    "counted_per_s",
    "gate_series",
    "point_from_replies",
    "points_from_ring",
    "queue_series",
]

#: How far back the charts reach, seconds.
DEFAULT_KEEP_S = 900.0


@dataclass(frozen=True, slots=True)
class Point:
    """One sample: the gates' schedule, limit and admissions counter (``None`` in a
    point written before the counter existed), the queues' depth and marks."""

    t_ms: float
    gates: Mapping[str, tuple[float | None, float, int, int | None]]
    queues: Mapping[str, tuple[int, int, int]]

    def to_json(self) -> str:
        return json.dumps(
            {
                "t": round(self.t_ms, 1),
                "g": {k: [v[0], v[1], v[2], v[3]] for k, v in self.gates.items()},
                "q": {k: list(v) for k, v in self.queues.items()},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Point:
        data = json.loads(raw)
        return cls(
            float(data["t"]),
            {
                k: (
                    None if v[0] is None else float(v[0]),
                    float(v[1]),
                    int(v[2]),
                    int(v[3]) if len(v) > 3 and v[3] is not None else None,
                )
                for k, v in data.get("g", {}).items()
            },
            {k: (int(v[0]), int(v[1]), int(v[2])) for k, v in data.get("q", {}).items()},
        )


def points_from_ring(raws: Sequence[bytes | str], *, now_ms: float, keep_s: float) -> list[Point]:
    """The ring's points (newest first, as ``LPUSH`` leaves them) oldest first, within
    ``keep_s`` of ``now_ms``; a point that does not parse is skipped, never fatal."""
    points = []
    for raw in raws:
        try:
            point = Point.from_json(raw)
        except (ValueError, KeyError, TypeError, IndexError):
            continue
        if now_ms - point.t_ms <= keep_s * 1000:
            points.append(point)
    return sorted(points, key=lambda p: p.t_ms)


def admitted_per_s(
    before: tuple[float | None, float], after: tuple[float | None, float], rate: float
) -> float | None:
    """The estimate for points without a counter: admissions per second between two
    ``(tat_ms, t_ms)`` looks at one gate, read off its schedule (see the module
    docstring for when it reads low).

    ``None`` when the gate has no rate (its TAT does not move) or no time passed.
    """
    (tat1, t1), (tat2, t2) = before, after
    if rate <= 0 or t2 <= t1 or not math.isfinite(rate):
        return None
    if tat2 is None:  # the TAT key expired: the bucket refilled, nothing moved it lately
        return 0.0
    start = tat1 if tat1 is not None and tat1 >= t1 else t2
    tokens = max(0.0, tat2 - start) / (1000.0 / rate)
    return tokens / ((t2 - t1) / 1000.0)


def counted_per_s(before: tuple[int, float], after: tuple[int, float]) -> float | None:
    """Admissions per second between two ``(admitted_total, t_ms)`` looks: the counter's
    delta over the time between them. ``None`` when no time passed or the counter went
    backwards (its key was deleted: the delta is not a count)."""
    (n1, t1), (n2, t2) = before, after
    if t2 <= t1 or n2 < n1:
        return None
    return (n2 - n1) / ((t2 - t1) / 1000.0)


def _pair_per_s(older: Point, newer: Point, name: str) -> float | None:
    tat1, _, _, n1 = older.gates[name]
    tat2, rate, _, n2 = newer.gates[name]
    if n1 is not None and n2 is not None and rate > 0 and math.isfinite(rate):
        # A gate without a rate has no limit line to chart against (as before).
        return counted_per_s((n1, older.t_ms), (n2, newer.t_ms))
    return admitted_per_s((tat1, older.t_ms), (tat2, newer.t_ms), rate)


@dataclass(frozen=True, slots=True)
class GateSeries:
    """One gate over the window: ``(t_ms, admitted/s)`` and ``(t_ms, limit/s)``."""

    name: str
    admitted: list[tuple[float, float]]
    limit: list[tuple[float, float]]

    @property
    def last(self) -> float | None:
        return self.admitted[-1][1] if self.admitted else None


@dataclass(frozen=True, slots=True)
class QueueSeries:
    """One queue over the window: depth, high mark and low mark, each ``(t_ms, n)``."""

    name: str
    depth: list[tuple[float, float]]
    hwm: list[tuple[float, float]]
    lwm: list[tuple[float, float]]


def gate_series(points: Sequence[Point]) -> list[GateSeries]:
    """Admitted/s per gate, one value per pair of consecutive points, by gate name."""
    names = sorted({name for point in points for name in point.gates})
    out = []
    for name in names:
        admitted: list[tuple[float, float]] = []
        limit: list[tuple[float, float]] = []
        for older, newer in itertools.pairwise(points):
            if name not in older.gates or name not in newer.gates:
                continue
            value = _pair_per_s(older, newer, name)
            if value is not None:
                admitted.append((newer.t_ms, value))
                limit.append((newer.t_ms, newer.gates[name][1]))
        out.append(GateSeries(name, admitted, limit))
    return out


def queue_series(points: Sequence[Point]) -> list[QueueSeries]:
    """Depth and watermarks per queue, by queue name."""
    names = sorted({name for point in points for name in point.queues})
    out = []
    for name in names:
        rows = [(p.t_ms, p.queues[name]) for p in points if name in p.queues]
        out.append(
            QueueSeries(
                name,
                [(t, float(v[0])) for t, v in rows],
                [(t, float(v[1])) for t, v in rows],
                [(t, float(v[2])) for t, v in rows],
            )
        )
    return out


def point_from_replies(
    names: Sequence[str],
    gate_replies: Sequence[Any],
    board: Mapping[bytes, bytes],
    *,
    env: Mapping[str, str] | None = None,
) -> Point:
    """A point from the sampler's one round trip: the gates view's replies
    (``[config, pause, leases, tat, admitted] × names + [TIME]``, see
    :func:`~tidegate.console.model.gate_rows`) and the load board's ``HGETALL``.

    A queue whose board entry is stale (its monitor stopped) is left out: a chart
    must not draw a flat line of the last number as if it were live.
    """
    rows = gate_rows(names, gate_replies, env=env)
    now_ms = now_ms_of(gate_replies[-1])
    gates = {}
    for index, row in enumerate(rows):
        tat, admitted = gate_replies[index * GATE_REPLIES + 3 : (index + 1) * GATE_REPLIES]
        gates[row.name] = (
            None if tat is None else float(tat),
            row.rate,
            row.burst,
            0 if admitted is None else int(admitted),
        )
    queues = {}
    for raw in board.values():
        entry = BoardEntry.from_json(raw, now_ms)
        if entry.fresh():
            queues[entry.state.queue] = (entry.depth.total, entry.marks.hwm, entry.marks.lwm)
    return Point(now_ms, gates, queues)
