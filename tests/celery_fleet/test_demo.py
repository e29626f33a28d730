"""`tidegate demo` as a new user runs it (small), checked on its own JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    by_process = report["peak_worker_rss_mb_by_process"]
    assert set(by_process) == {"customs", "tos"}
    assert all(v["main"] > 0 and v["child"] > 0 for v in by_process.values())
    # The TOS pool is sized around its 4 connections with 2 relayed requests on each,
    # and the TOS's own record says how busy they were (a figure, not a promise: this
    # small run is mostly ramp and tail) and that it never served more than 4 at once.
    tos = report["downstreams"]["tos"]
    assert tos["pool_workers"] == 11
    assert tos["pool_reason"].startswith("connections × depth: ")
    assert 0 < tos["busy_share"] <= 1
    assert tos["responses_503"] == 0


class _ForgetOneAccept:
    """A downstream whose record loses one accepted document at the end of the run."""

    def __init__(self) -> None:
        self.forgotten: str | None = None

    def worker_env(self) -> dict[str, str]:
        return {}

    def documents(self, burst: list[Any]) -> list[Any]:
        return burst

    def started(self, run: Any) -> None:
        pass

    def tick(self, run: Any, t: float) -> None:
        pass

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: Any) -> dict[str, Any]:
        keys = run.tos.accepted_keys()
        self.forgotten = keys[0]
        run.tos.accepted_keys = lambda: keys[1:]
        return {}


def test_a_delivery_the_downstream_has_no_record_of_is_lost(redis_url: str) -> None:
    """The report counts each key from the downstream's own record: drop one accepted
    record and the report says lost 1, and which key — it is never made up by
    subtraction."""
    from tidegate.harness.scenarios.vessel import VesselConfig, run_vessel_demo

    forget = _ForgetOneAccept()
    report, _ = run_vessel_demo(
        redis_url, VesselConfig(interchanges=60, customs_rate=50.0), disturbance=forget
    )
    assert forget.forgotten is not None
    assert (report["submitted"], report["delivered"], report["lost"]) == (60, 59, 1)
    assert report["lost_keys"] == [forget.forgotten]
