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

    def xy(t: float, v: float) -> str:
        x = (t - t0_ms) / span * WIDTH
        y = HEIGHT - v / scale * (HEIGHT - _TOP)
        return f"{max(0.0, min(WIDTH, x)):.1f},{y:.1f}"

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" role="img"'
        f'  aria-label="{escape(title)}">',
        f'<line class="axis" x1="0" y1="{HEIGHT:g}" x2="{WIDTH:g}" y2="{HEIGHT:g}"/>',
    ]
    for line in lines:
        if not line.points:
            continue
        drawn = " ".join(xy(t, v) for t, v in line.points)
        if len(line.points) == 1:  # one point is a dot, not an invisible line
            x, y = drawn.split(",")
            parts.append(f'<circle class="line-{escape(line.kind)}" r="2" cx="{x}" cy="{y}"/>')
        else:
            parts.append(f'<polyline class="line-{escape(line.kind)}" points="{drawn}"/>')
    parts.append(f'<text class="scale" x="2" y="10">{_fmt(top)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every interpolated value is escaped or a number
