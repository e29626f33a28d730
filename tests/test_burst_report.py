"""One report for a vessel burst, whichever engine worked it (``harness/burst_run.py``).

The Celery and RQ runs each built the report's dict; both now call
:func:`burst_report`. The keys and their order are pinned here as the Celery run wrote
them before, so neither engine's report (nor the end table, which follows that order)
changes.
"""

from __future__ import annotations

from typing import Any

from tidegate.harness.burst_run import burst_report
from tidegate.harness.reconcile import reconcile
from tidegate.harness.scenarios.vessel import Sample, VesselConfig
from tidegate.load.sizing import PoolSize

#: The keys of ``run_vessel_demo``'s report before it called ``burst_report``.
CELERY_KEYS = [
    "scenario",
    "broker",
    "submitted",
    "delivered",
    "dead_lettered",
    "quarantined",
    "refused_at_intake",
    "pending",
    "lost",
    "lost_keys",
    "accepted_twice",
    "unexpected_accepts",
    "submit_s",
    "duplicates",
    "peak_worker_rss_mb",
    "peak_worker_rss_mb_by_process",
    "elapsed_s",
    "samples_skipped",
    "by_class",
    "downstreams",
    "config",
]


def _stats(keys: int, duplicates: int) -> dict[str, Any]:
    return {
        "distinct_keys": keys,
        "duplicates": duplicates,
        "responses_429": 1,
        "responses_503": 0,
        "max_accepted_1s": 3,
        "first_accept_ts": 100.0,
        "last_accept_ts": 102.0,
    }


def _report(engine: dict[str, str], pool: PoolSize | None) -> dict[str, Any]:
    sample = Sample(
        t=2.5,
        depth={},
        accepted={},
        responses_429=0,
        responses_503=0,
        parked=0,
        dead_lettered=0,
        rss_mb=300.0,
        rss_by_process={"tos": {"main": 60.0, "child": 50.0}},
    )
    return burst_report(
        scenario="vessel",
        engine=engine,
        outcome=reconcile(["a", "b", "c"], accepted={"a": 1, "b": 2}, dead_lettered=["c"]),
        submit_s=0.1234,
        customs=_stats(1, 0),
        tos=_stats(1, 1),
        samples=[sample],
        samples_skipped=2,
        classes=["VERMAS", "COARRI", "VERMAS"],
        config=VesselConfig(customs_rate=10.0, tos_connections=4, tos_service_s=0.05),
        tos_pool=pool,
    )


def test_the_celery_report_keeps_its_keys_and_their_order() -> None:
    report = _report({"broker": "redis"}, PoolSize(7, "connections", "4 connections"))

    assert list(report) == CELERY_KEYS
    assert report["downstreams"]["tos"]["pool_workers"] == 7
    assert list(report["downstreams"]["tos"])[-2:] == ["pool_workers", "pool_reason"]


def test_the_figures_come_from_the_reconciliation_and_the_sims_records() -> None:
    report = _report({"engine": "rq"}, None)

    assert list(report)[:2] == ["scenario", "engine"]
    assert (report["delivered"], report["dead_lettered"], report["lost"]) == (2, 1, 0)
    assert report["accepted_twice"] == 1
    assert report["duplicates"] == 1  # the TOS's own count
    assert report["by_class"] == {"COARRI": 1, "VERMAS": 2}
    assert report["downstreams"]["customs"]["limit"] == "10/s"
    assert report["downstreams"]["tos"]["limit"] == "4 connections"
    assert "pool_workers" not in report["downstreams"]["tos"]
    assert report["peak_worker_rss_mb"] == 300.0
    assert (report["submit_s"], report["samples_skipped"]) == (0.123, 2)
