"""Small line charts as inline SVG, drawn on the server: no chart library, no script.

A chart is a few hundred bytes of ``<polyline>``: it needs nothing from a CDN (the
console runs in air-gapped terminal networks), nothing the CSP would have to allow,
and it is the same on a phone and on a wall (the SVG scales to its box). Colours come
from CSS classes (``line-*``), so the page's stylesheet owns the palette.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["Line", "line_chart"]

#: The drawing box, in SVG units (the element itself is sized by CSS).
WIDTH, HEIGHT = 300.0, 80.0
#: Space kept for the scale's label at the top.
_TOP = 12.0


@dataclass(frozen=True, slots=True)
class Line:
    """One series: ``(t_ms, value)`` points and its CSS class (``measured``, ``limit``…)."""

    points: Sequence[tuple[float, float]]
    kind: str


def _fmt(value: float) -> str:
    if value >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.1f}"


def _simplified(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The points on whole SVG units, without those that change nothing: a repeat of the
    previous point, or the middle of a level run. A limit or a watermark is then two
    points, and a chart of 180 samples stays a few hundred bytes (the page must weigh
    under 300 KB with dozens of gates, refreshed by every open browser)."""
    out: list[tuple[int, int]] = []
    for point in points:
        if out and point == out[-1]:
            continue
        if len(out) >= 2 and out[-2][1] == out[-1][1] == point[1]:
            out[-1] = point
            continue
        out.append(point)
    return out


def line_chart(lines: Sequence[Line], *, t0_ms: float, t1_ms: float, title: str) -> Markup:
    """An SVG of ``lines`` over ``[t0_ms, t1_ms]``, the y axis from 0 to the largest value.

    Args:
        lines: the series, drawn in order (the last on top).
        t0_ms / t1_ms: the window's left and right edges.
        title: what a screen reader says the chart is.
    """
    top = max((v for line in lines for _, v in line.points), default=0.0)
    scale = top * 1.1 if top > 0 else 1.0
    span = max(1.0, t1_ms - t0_ms)

    def xy(t: float, v: float) -> tuple[int, int]:
        x = (t - t0_ms) / span * WIDTH
        y = HEIGHT - v / scale * (HEIGHT - _TOP)
        return round(max(0.0, min(WIDTH, x))), round(y)

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" role="img"'
        f'  aria-label="{escape(title)}">',
        f'<line class="axis" x1="0" y1="{HEIGHT:g}" x2="{WIDTH:g}" y2="{HEIGHT:g}"/>',
    ]
    for line in lines:
        if not line.points:
            continue
        drawn = _simplified([xy(t, v) for t, v in line.points])
        if len(drawn) == 1:  # one point is a dot, not an invisible line
            (x, y), kind = drawn[0], escape(line.kind)
            parts.append(f'<circle class="line-{kind}" r="2" cx="{x}" cy="{y}"/>')
        else:
            points = " ".join(f"{x},{y}" for x, y in drawn)
            parts.append(f'<polyline class="line-{escape(line.kind)}" points="{points}"/>')
    parts.append(f'<text class="scale" x="2" y="10">{_fmt(top)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every interpolated value is escaped or a number
