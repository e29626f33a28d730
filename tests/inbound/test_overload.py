"""The overload scenario, small: real Celery workers, real sims, shedding and replay."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tidegate.harness.scenarios.overload import (
    OverloadConfig,
    live_table,
    report_table,
    run_overload_demo,
)

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]


def test_overload_sheds_bulk_never_vermas_and_loses_nothing(redis_url: str) -> None:
    """400 bulk B/L PDFs + 20 VERMAS at ~200/s into lanes that drain at 80/s and 20/s:
    bulk is quarantined under sustained overload and replayed once the queue drained;
    VERMAS are never quarantined and all delivered before the last bulk document;
    delivered = submitted, lost 0, no duplicates at the downstreams."""
    config = OverloadConfig(
        vermas=20,
        bulk=400,
        customs_rate=20.0,
        docstore_rate=80.0,
        docstore_concurrency=4,
        customs_workers=1,
        bulk_workers=2,
        hwm=40,
        lwm=10,
        shed_after=2,
        interval_s=0.1,
        replay_rate=200.0,
        arrival_s=2.0,
        timeout_s=120.0,
    )
    report, samples = run_overload_demo(redis_url, config)

    assert report["submitted"] == 420
    assert report["vermas_quarantined"] == 0
    assert "VERMAS" not in report["shed_by_class"]
    assert report["queued_at_intake"]["VERMAS"] == 20
    assert report["shed_by_class"]["BULK_BL_PDF"] > 0
    assert report["replayed"] == report["shed_by_class"]["BULK_BL_PDF"]
    assert report["delivered"] == report["submitted"]
    assert report["delivered_by_class"] == {"VERMAS": 20, "BULK_BL_PDF": 400}
    assert (report["lost"], report["pending"], report["duplicates"]) == (0, 0, 0)
    assert report["ordering"]["vermas_all_before_last_bulk"]
    assert report["downstreams"]["customs"]["responses_429"] == 0
    bulk_signals = [change["signal"] for change in report["signals"]["bulk.documents"]]
    assert "scale_in" in bulk_signals
    assert {"scale_out", "hold"} & set(bulk_signals)
    assert any(sample.shedding.get("bulk.documents") for sample in samples)
    console = Console(file=io.StringIO(), width=160)
    console.print(live_table(samples[-1], report["submitted"]), report_table(report))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "vermas_quarantined" in shown
    assert "bulk.documents" in shown
