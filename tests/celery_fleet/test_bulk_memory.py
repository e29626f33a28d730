"""A bulk worker's pool child does not hold what it publishes.

``bulk.aggregate`` publishes one forward per B/L (and ``bulk.dispatch`` one parse task
per B/L) from inside a task. Celery keeps every task sent from inside a task as an
``AsyncResult`` on the sender's request while ``trail`` is on (its default), until the
task returns — and a task with a stored result then writes them all into it: a
100,000-B/L manifest made one bulk child reach 173 MiB. The aggregate carves nothing,
so its child's peak shows the publishing alone: after 20,000 forwards it must stay
within a small fraction of its peak after 1,000, measured in the same test.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.bulk import BatchStore
from tidegate.harness.celery_fleet import Fleet, Pool

pytestmark = [pytest.mark.celery, pytest.mark.slow, pytest.mark.redis]

WARM_UP = 1_000
LARGE = 20_000
#: The child's peak RSS may grow by this fraction of its peak after the warm-up.
GROWTH_BOUND = 0.05


def _peak_rss(pid: int) -> int:
    """The process's high-water RSS (``VmHWM``, bytes): its peak, not a sampled look."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def _parsed_batch(store: BatchStore, batch_id: str, bls: int) -> None:
    """A batch whose every unit is parsed and recorded, as the parse tasks leave it."""
    keys = [f"{batch_id}-{i:06d}" for i in range(bls)]
    store.save_units(batch_id, ({"key": key} for key in keys))
    for i, key in enumerate(keys):
        outcome = {"status": "ok", "key": key, "bl_number": f"BL{batch_id}{i:06d}"}
        store.record_outcome(batch_id, key, outcome)


def _aggregate(producer: Celery, store: BatchStore, batch_id: str) -> None:
    producer.send_task("bulk.aggregate", args=[batch_id], queue="bulk.dispatch")
    deadline = time.monotonic() + 300
    while store.summary(batch_id) is None:
        assert time.monotonic() < deadline, f"{batch_id} not aggregated in 300 s"
        time.sleep(0.2)


# 21,000 recorded outcomes and 21,000 tracked publishes: minutes when the CPUs are shared.
@pytest.mark.timeout(900)
def test_aggregate_child_does_not_hold_its_publishes(redis_url: str, tmp_path: Path) -> None:
    """One pool child aggregates 1,000 B/Ls, then 20,000 (20,000 ``apply_async`` from one
    task): its peak RSS grows by at most 5 % of its peak after the first."""
    prefix = f"tgbulkmem-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    store = BatchStore(client, prefix=prefix)
    env = {"TIDEGATE_REDIS_URL": redis_url, "TIDEGATE_PREFIX": prefix}
    # Only the bulk queue is consumed: the forwards wait in the broker.
    fleet = Fleet(
        "tidegate.harness.vessel_app",
        [Pool("bulk", ["bulk.dispatch"], concurrency=1)],
        env=env,
        log_dir=tmp_path,
    )
    producer = Celery(broker=redis_url)
    _parsed_batch(store, "warm", WARM_UP)
    _parsed_batch(store, "large", LARGE)
    fleet.start()
    try:
        _aggregate(producer, store, "warm")
        (child,) = fleet.child_pids("bulk")
        baseline = _peak_rss(child)
        _aggregate(producer, store, "large")
        assert fleet.child_pids("bulk") == [child], "the child was recycled mid-test"
        peak = _peak_rss(child)
        assert client.llen("edi.tos") == WARM_UP + LARGE
        assert store.summary("large")["forwarded"] == LARGE  # type: ignore[index]
    finally:
        fleet.stop()
        producer.close()
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.delete("edi.tos", "bulk.dispatch")
        client.close()
    growth = (peak - baseline) / baseline
    print(f"aggregating child's peak {baseline / 2**20:.1f} → {peak / 2**20:.1f} MiB")
    assert growth <= GROWTH_BOUND, (
        f"the aggregating child's peak grew {growth:.1%}: "
        f"{baseline / 2**20:.1f} → {peak / 2**20:.1f} MiB"
    )
