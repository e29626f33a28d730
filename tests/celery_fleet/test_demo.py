"""`tidegate demo` as a new user runs it (small), checked on its own JSON report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tidegate.cli import cli

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]


def test_vessel_demo_delivers_everything_once_without_429(tmp_path: Path, redis_url: str) -> None:
    """The main job end to end: real workers, real sims, the report's promises hold."""
    report_path, plot_path = tmp_path / "report.json", tmp_path / "run.png"
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--interchanges",
            "120",
            "--customs-rate",
            "20",
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
    assert report["submitted"] == 120
    assert report["delivered"] == 120
    assert report["lost"] == 0
    assert report["duplicates"] == 0
    assert customs["responses_429"] == 0
    assert customs["max_accepted_1s"] <= 20 + 3  # rate + the gateway's burst
    assert report["peak_worker_rss_mb"] > 0
    assert plot_path.stat().st_size > 10_000
