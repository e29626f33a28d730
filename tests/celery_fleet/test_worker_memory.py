"""A worker's main process does not grow with the backlog it works through.

Prefetch 1 + acks_late keep the backlog in the broker; what the main process does on
the side (the parking mover, the orphan sweep, Celery's own time-limit timers) must not
bring it back into memory. Every pool child a recycled pool forks inherits the main
process's heap, so its growth is the whole pool's.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psutil
import pytest
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.integrations.celery.sweep import track_publishes
from tidegate.load.outstanding import Outstanding
from tidegate.sim import CustomsSim, TosSim

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.redis]

WARM_UP = 500
BACKLOG = 4_000
#: The main process may grow by this fraction of its own size after the warm-up.
GROWTH_BOUND = 0.10


def _wait(predicate: object, timeout_s: float, on_poll: object = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if on_poll is not None:
            on_poll()  # type: ignore[operator]
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"not settled within {timeout_s}s")


def test_main_process_memory_stays_flat_through_a_backlog(redis_url: str, tmp_path: Path) -> None:
    """4,000 queued units, with the orphan sweep armed while they wait: the worker's
    main process ends within 10 % of what it was after a 500-unit warm-up."""
    prefix = f"tgmem-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    docs = [d for d in vessel_burst((WARM_UP + BACKLOG) * 2, seed=5) if d.queue == "edi.tos"]
    assert len(docs) >= WARM_UP + BACKLOG
    with (
        CustomsSim(rate=1000.0, burst=100) as customs,
        TosSim(max_connections=64, service_s=0.0) as tos,
    ):
        env = {
            "TIDEGATE_REDIS_URL": redis_url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_TOS_RATE": "100000",
            "TIDEGATE_TOS_BURST": "1000",
            "TIDEGATE_TOS_CONCURRENCY": "64",
            "TIDEGATE_SWEEP_INTERVAL_S": "1",
        }
        fleet = Fleet(
            "tidegate.harness.vessel_app",
            [Pool("tos", ["edi.tos"], concurrency=2)],
            env=env,
            log_dir=tmp_path,
        )
        producer = Celery(broker=redis_url)
        outstanding = Outstanding(client, prefix=prefix)
        untrack = track_publishes(["edi.tos.push"], outstanding, app=producer)

        def publish(batch: list[object]) -> None:
            with producer.connection_for_write() as conn:
                for doc in batch:
                    producer.send_task(
                        "edi.tos.push",
                        args=[doc.envelope()],  # type: ignore[attr-defined]
                        queue="edi.tos",
                        connection=conn,
                    )

        def delivered() -> int:
            return int(tos.stats(timeline=False)["distinct_keys"])

        fleet.start()
        try:
            main = psutil.Process(fleet.main_pids()["tos"])
            publish(docs[:WARM_UP])
            _wait(lambda: delivered() == WARM_UP and len(outstanding) == 0, 120)
            baseline = main.memory_info().rss

            # A worker that died without a clean shutdown arms the sweep: the backlog
            # is read while it waits, the worst case for the main process.
            outstanding.beat("killed-worker", dead_after_s=10, arm_sweeps=3, now_ms=1_000)
            peak = baseline

            def sample() -> None:
                nonlocal peak
                peak = max(peak, main.memory_info().rss)

            publish(docs[WARM_UP : WARM_UP + BACKLOG])
            _wait(lambda: delivered() == WARM_UP + BACKLOG, 300, on_poll=sample)
            sample()
            assert tos.stats(timeline=False)["duplicates"] == 0
        finally:
            untrack()
            fleet.stop()
            producer.close()
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.delete("edi.tos", "edi.customs")
            client.close()
    growth = (peak - baseline) / baseline
    assert growth <= GROWTH_BOUND, (
        f"main process grew {growth:.1%}: {baseline / 2**20:.1f} → {peak / 2**20:.1f} MiB"
    )
