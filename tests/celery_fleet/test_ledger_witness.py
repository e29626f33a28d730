"""A pool child recycled after tidegate's Redis came back empty knows it restarted.

Celery recycles a prefork child after ``max_tasks_per_child`` tasks; the new child's
delivery ledger would know of no Redis server before the one it meets. If that server
came back without the record of the one before (no AOF, or a crash within a second of
the record's first write), the child took it for a first sight, and a document whose
``delivered`` mark was lost with it was sent again. The worker's main process reads the
server once it is ready (``tidegate.load.ledger.witness_server``); children forked from
it start from that.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis
from celery import Celery

from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery import configure
from tidegate.load import DeliveryLedger, DeliveryState
from tidegate.redis_server import EmbeddedRedis
from tidegate.sim import TosSim

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]


def test_a_recycled_pool_child_asks_before_resending_after_an_empty_restart(
    redis_url: str, tmp_path: Path
) -> None:
    """One TOS report is delivered; tidegate's store (its own Redis; the broker is
    another) is killed and comes back empty; the same report arrives again, as a
    message the lost second gave back would. The child that takes it is new (one task
    per child): it asks the TOS, which has it, and does not send it again (before:
    no lookup, and the TOS's second copy a duplicate)."""
    prefix = f"tgwit-{uuid.uuid4().hex[:8]}"
    queue = f"{prefix}.tos"
    store = EmbeddedRedis(appendonly=False).start()
    producer = configure(Celery(broker=redis_url, set_as_current=False))
    report = next(doc for doc in vessel_burst(40, seed=7) if doc.queue == "edi.tos")
    key = f"wit-{uuid.uuid4().hex[:12]}"
    envelope = {**report.envelope(), "key": key}

    def delivered() -> bool:
        ledger = DeliveryLedger(redis.Redis.from_url(store.url), prefix=prefix)
        return ledger.state("tos", key) is DeliveryState.DELIVERED

    try:
        with TosSim(max_connections=2, service_s=0.01) as tos:
            env = {
                "TIDEGATE_REDIS_URL": store.url,
                "TIDEGATE_BROKER_URL": redis_url,
                "TIDEGATE_PREFIX": prefix,
                "TIDEGATE_TOS_URL": tos.url,
                "TIDEGATE_CUSTOMS_URL": tos.url,
                "TIDEGATE_MAX_WAIT_S": "1.5",
            }
            one_task_per_child = ("--max-tasks-per-child", "1")
            pool = Pool("witness", [queue], concurrency=1, extra=one_task_per_child)
            fleet = Fleet("tidegate.harness.vessel_app", [pool], env=env, log_dir=tmp_path)
            fleet.start()
            try:
                producer.send_task("edi.tos.push", args=[envelope], queue=queue)
                wait_for(delivered, 60, "the first delivery")
                store.kill()
                store.start()
                producer.send_task("edi.tos.push", args=[envelope], queue=queue)
                wait_for(delivered, 60, "the second copy settled")
            finally:
                fleet.stop()
            stats = tos.stats(timeline=False)
    finally:
        producer.close()
        store.stop()
        redis.Redis.from_url(redis_url).delete(queue)

    assert stats["lookups"] == 1
    assert tos.accepted_keys() == [key]
    assert stats["duplicates"] == 0
