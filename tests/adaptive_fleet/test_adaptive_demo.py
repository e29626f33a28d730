"""``tidegate demo --scenario adaptive``: its figures are the sim's own record, the
reconciliation holds, and the arithmetic behind utilisation and convergence is right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.harness.scenarios.adaptive import (
    AdaptiveDemoConfig,
    capacity_at,
    converge_s,
    converged_utilisation,
    customs_figures,
)

CONFIG = AdaptiveDemoConfig(customs_rate=10.0, dip_at_s=20.0, dip_s=20.0, dip_factor=0.4)


def _record(accepts: list[float], origin: float = 1000.0) -> dict[str, object]:
    return {
        "accept_timeline": [origin + t for t in accepts],
        "distinct_keys": len(accepts),
        "duplicates": 0,
        "responses_429": 3,
        "responses_503": 0,
        "suspensions": 0,
        "max_accepted_1s": 10,
    }


def test_capacity_follows_the_dip() -> None:
    assert [capacity_at(CONFIG, t) for t in (0.0, 19.9, 20.0, 39.9, 40.0, 100.0)] == [
        10.0,
        10.0,
        4.0,
        4.0,
        10.0,
        10.0,
    ]


def test_admitting_exactly_the_capacity_is_full_utilisation_from_the_first_window() -> None:
    # One accept every 1/capacity seconds, through the dip and after it, for 60 s.
    accepts, t = [], 0.0
    while t < 60.0:
        accepts.append(t)
        t += 1.0 / capacity_at(CONFIG, t)
    figures = customs_figures(CONFIG, _record(accepts), origin=1000.0)
    assert figures["accepted"] == len(accepts)
    assert figures["utilisation"] == pytest.approx(1.0, abs=0.01)
    assert figures["converge_s"] == 3.0
    assert figures["share_429"] == round(3 / len(accepts), 4)


def test_a_slow_start_converges_when_the_rolling_rate_reaches_90_percent() -> None:
    # 2/s for the first 10 s, then the full 10/s: no window before 10 s reaches 9/s.
    slow = [i * 0.5 for i in range(20)]
    fast = [10.0 + i * 0.1 for i in range(100)]
    reached = converge_s(CONFIG, slow + fast)
    assert reached is not None
    assert 10.0 < reached <= 13.0
    assert converge_s(CONFIG, slow) is None
    figures = customs_figures(CONFIG, _record(slow + fast), origin=1000.0)
    assert figures["utilisation"] == pytest.approx(120 / (10.0 * fast[-1]), abs=0.001)


def _at_rates(*phases: tuple[float, float, float]) -> list[float]:
    """Accepts evenly spaced at ``rate`` from ``start`` to ``end``, per phase."""
    accepts: list[float] = []
    for start, end, rate in phases:
        accepts += [start + i / rate for i in range(round((end - start) * rate))]
    return accepts


def test_utilisation_once_converged_counts_from_the_first_window_at_90_percent() -> None:
    """Before the dip: 2/s until 10 s, then 9.5/s: converged from 13 s, 0.95 of the
    capacity to the dip. After it: 5/s (half) until 50 s, then the full 10/s to 70 s:
    converged from 53 s, whole. The run's utilisation counts the slow parts too."""
    accepts = _at_rates((0, 10, 2.0), (10, 20, 9.5), (20, 40, 4.0), (40, 50, 5.0), (50, 70, 10.0))
    converged = converged_utilisation(CONFIG, accepts)
    assert converged["before_dip"] == pytest.approx(0.95, abs=0.02)
    assert converged["after_dip"] == pytest.approx(1.0, abs=0.02)
    figures = customs_figures(CONFIG, _record(accepts), origin=1000.0)
    assert figures["utilisation_converged"] == converged
    assert figures["utilisation"] < 0.85


def test_a_phase_that_never_converges_or_converges_late_has_no_share() -> None:
    """At 8/s before the dip no window reaches 9/s; after it, the full rate from 55 s
    reaches 90 % at 58 s, under 4 s before the last accept: too little to count."""
    accepts = _at_rates((0, 20, 8.0), (20, 40, 4.0), (40, 55, 5.0), (55, 62, 10.0))
    assert converged_utilisation(CONFIG, accepts) == {"before_dip": None, "after_dip": None}
    longer = [*accepts, *_at_rates((62, 70, 10.0))]
    assert converged_utilisation(CONFIG, longer)["after_dip"] == pytest.approx(1.0, abs=0.02)
    assert converged_utilisation(CONFIG, []) == {"before_dip": None, "after_dip": None}


@pytest.mark.redis
@pytest.mark.celery
@pytest.mark.slow
def test_adaptive_demo_reports_from_the_sims_record(tmp_path: Path, redis_url: str) -> None:
    """A tiny run through the real fleet: everything delivered once, and the customs
    figures are the sim's (accepted equals its distinct accepts, all computed)."""
    report_path, plot_path = tmp_path / "report.json", tmp_path / "adaptive.png"
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--scenario",
            "adaptive",
            "--interchanges",
            "150",
            "--json",
            str(report_path),
            "--plot",
            str(plot_path),
        ],
        env={"REDIS_URL": redis_url},
    )

    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    customs = report["downstreams"]["customs"]
    assert report["scenario"] == "adaptive"
    assert report["submitted"] == 150
    assert report["delivered"] == 150
    assert report["lost"] == 0
    assert report["accepted_twice"] == 0
    # VERMAS and CUSCAR go to customs: the sim's own record has each of them once.
    assert customs["accepted"] == report["by_class"]["VERMAS"] + report["by_class"]["CUSCAR"]
    assert customs["accepted"] + report["downstreams"]["tos"]["accepted"] == 150
    assert customs["duplicates"] == 0
    assert isinstance(customs["responses_429"], int)
    assert isinstance(customs["suspensions"], int)
    assert 0 < customs["utilisation"] <= 1.5
    assert customs["converge_s"] is None or customs["converge_s"] >= 3.0
    assert set(customs["utilisation_converged"]) == {"before_dip", "after_dip"}
    assert customs["schedule"] == [[20.0, 4.0], [40.0, 10.0]]
    assert plot_path.stat().st_size > 10_000
    assert "plot:" in result.output
