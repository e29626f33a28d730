"""The demo's plot, drawn from a report and samples shaped like a real run's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from tidegate.harness.plot import build_figure, plot_run

T0 = 1_000.0


def _report() -> dict[str, Any]:
    customs = [T0 + i * 0.1 for i in range(100)]  # 10 a second for 10 s
    tos = [T0 + i * 0.02 for i in range(300)]  # 50 a second for 6 s
    return {
        "scenario": "vessel",
        "submitted": 400,
        "delivered": 400,
        "dead_lettered": 0,
        "lost": 0,
        "duplicates": 0,
        "by_class": {"VERMAS": 80, "CUSCAR": 20, "COARRI": 180, "CODECO": 120},
        "downstreams": {
            "customs": {
                "limit": "10/s",
                "limit_per_s": 10.0,
                "responses_429": 3,
                "responses_503": 0,
                "max_accepted_1s": 11,
            },
            "tos": {
                "limit": "4 connections",
                "limit_per_s": 80.0,
                "responses_429": 0,
                "responses_503": 0,
                "max_accepted_1s": 50,
            },
        },
        "config": {"tos_connections": 4, "customs_burst": 3},
        "_timelines": {"customs": customs, "tos": tos, "t0": T0},
    }


def _samples() -> list[Any]:
    return [
        SimpleNamespace(
            t=i * 0.5,
            depth={"edi.customs": max(0, 100 - 5 * i), "edi.tos": max(0, 300 - 50 * i)},
            parked=max(0, 10 - i),
        )
        for i in range(24)
    ]


@pytest.fixture
def figure() -> Any:
    fig = build_figure(_report(), _samples())
    yield fig
    plt.close(fig)


def _texts(fig: Figure) -> str:
    parts = []
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_ylabel(), ax.get_xlabel()]
        parts += [t.get_text() for t in ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            parts += [t.get_text() for t in legend.get_texts()]
    return "\n".join(parts)


def test_the_plot_speaks_the_ports_language(figure: Figure) -> None:
    """Customs gateway, terminal system, the document types — not "customs", "tos"."""
    text = _texts(figure)

    assert "customs gateway" in text
    assert "terminal system" in text
    assert "VERMAS 80" in text
    assert "edi.customs" in text  # the queue is still named, for whoever runs it


def test_the_customs_panel_shows_the_429_count_and_the_peak(figure: Figure) -> None:
    text = _texts(figure)

    assert "429 (too many requests): 3" in text
    assert "peak: 11 accepted in any one second (the gateway allows 10/s plus a burst of 3)" in text


def test_the_limit_line_is_told_apart_from_the_admitted_rate(figure: Figure) -> None:
    """What the gateway admitted is drawn as filled bars, one a second; the limit is a
    dashed line of another colour at the limit."""
    customs_ax = figure.axes[1]
    lines = {line.get_label(): line for line in customs_ax.get_lines()}
    limit = lines["the gateway's limit: 10/s"]
    (bars,) = customs_ax.containers
    heights = [patch.get_height() for patch in bars.patches]

    assert bars.get_label() == "accepted by the customs gateway, per second"
    assert max(heights) == 10
    assert sum(heights) == 100
    assert list(limit.get_ydata()) == [10.0, 10.0]
    assert limit.get_linestyle() == "--"
    assert limit.get_color() != bars.patches[0].get_facecolor()


def test_a_concurrency_limit_is_shown_as_connections_not_a_rate(figure: Figure) -> None:
    """The TOS limit is "4 connections": no "80/s" anywhere, no flat line at 80."""
    text = _texts(figure)
    tos_ax = figure.axes[2]
    flat = [
        line
        for line in tos_ax.get_lines()
        if isinstance(line, Line2D) and len(set(line.get_ydata())) == 1 and len(line.get_ydata())
    ]

    assert "4 connections" in tos_ax.get_title()
    assert "80/s" not in text
    assert not [line for line in flat if line.get_ydata()[0] == 80]


def test_plot_run_writes_a_png(tmp_path: Path) -> None:
    path = plot_run(_report(), _samples(), tmp_path / "sub" / "run.png")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
