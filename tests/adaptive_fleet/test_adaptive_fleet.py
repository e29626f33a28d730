"""The adaptive gate in a real Celery fleet: learn a hidden capacity, survive the
controller's SIGKILL, lose nothing.

Real worker processes (prefork children of ``tidegate.harness.vessel_app``), real Redis
(broker and tidegate state), the customs sim over HTTP. The gate is never told the
sim's rate; each pool child that delivers to customs reports its calls and runs the
controller loop, and one of them holds the lease.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.flow import Gate
from tidegate.flow.adaptive import RedisAdaptiveStore
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery import configure
from tidegate.keys import Keyspace
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.sim import CustomsSim

pytestmark = pytest.mark.redis

#: The customs sim's true capacity, never told to the gate.
HIDDEN_RATE = 4.0
DOCUMENTS = 120


@pytest.fixture
def adaptive_fleet(redis_url: str, tmp_path: Any) -> Iterator[dict[str, Any]]:
    prefix = f"tgada-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    with CustomsSim(
        rate=HIDDEN_RATE, burst=2, suspend_after=5, suspend_window_s=10.0, suspend_s=30.0
    ) as customs:
        env = {
            "TIDEGATE_REDIS_URL": redis_url,
            "TIDEGATE_BROKER_URL": redis_url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": customs.url,
            "TIDEGATE_CUSTOMS_RATE": "1",
            "TIDEGATE_CUSTOMS_BURST": "1",
            "TIDEGATE_CUSTOMS_ADAPTIVE": "on",
            "TIDEGATE_CUSTOMS_MIN_RATE": "1",
            "TIDEGATE_CUSTOMS_MAX_RATE": "50",
            "TIDEGATE_CUSTOMS_SUSPENSION_PRONE": "true",
            "TIDEGATE_MAX_WAIT_S": "1.5",
            "TIDEGATE_LOG_LEVEL": "INFO",
            "TIDEGATE_SWEEP_INTERVAL_S": "2",
        }
        fleet = Fleet(
            "tidegate.harness.vessel_app",
            [Pool("customs", ["edi.customs"], concurrency=3)],
            env=env,
            log_dir=tmp_path,
        )
        producer = configure(Celery(broker=redis_url, backend=redis_url, set_as_current=False))
        fleet.start()
        try:
            yield {
                "prefix": prefix,
                "client": client,
                "customs": customs,
                "fleet": fleet,
                "producer": producer,
            }
        finally:
            fleet.stop()
            producer.close()
            stale = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if stale:
                client.delete(*stale)
            client.delete("edi.customs")
            client.close()


def submit(producer: Celery, count: int) -> list[str]:
    salt = uuid.uuid4().hex[:12]
    keys: list[str] = []
    for doc in vessel_burst(count * 40, seed=time.time_ns()):
        if doc.queue != "edi.customs":
            continue
        envelope = {**doc.envelope(), "key": f"{doc.key[:48]}-{salt}"}
        producer.send_task("edi.customs.submit", args=[envelope], queue="edi.customs")
        keys.append(str(envelope["key"]))
        if len(keys) == count:
            return keys
    raise AssertionError("the burst did not hold enough customs documents")


def test_the_controller_survives_its_workers_sigkill_and_nothing_is_lost(
    adaptive_fleet: dict[str, Any],
) -> None:
    """A burst against a customs gateway of hidden capacity 4/s, adaptive on: a pool
    child wins the lease and raises the gate's rate from the 1/s floor; it is
    SIGKILLed; another child takes the lease over once it expires and goes on deciding
    from the learned state; every document is delivered once, none suspended."""
    client, prefix = adaptive_fleet["client"], adaptive_fleet["prefix"]
    customs: CustomsSim = adaptive_fleet["customs"]
    store = RedisAdaptiveStore(client)
    keys = Keyspace(prefix).adaptive("customs")
    gate = Gate(client, "customs", prefix=prefix)

    submitted = submit(adaptive_fleet["producer"], DOCUMENTS)
    wait_for(lambda: gate.state().policy.rate > 2.0, 60, "the controller raised the rate")
    first = store.leader(keys)
    assert first is not None
    killed = int(first.split(":")[1])
    learned = store.load(keys).rate
    assert learned is not None

    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: (store.leader(keys) or first) != first, 60, "another worker holds the lease")
    second = store.leader(keys)
    assert second is not None
    assert int(second.split(":")[1]) != killed
    taken_over_ms = store.now_ms()

    def decided_since() -> bool:
        state = store.load(keys).rate
        return state is not None and (state.updated_ms or 0) > taken_over_ms

    wait_for(decided_since, 30, "the new controller keeps deciding")
    wait_for(
        lambda: customs.stats(timeline=False)["distinct_keys"] >= len(submitted),
        240,
        "every document delivered",
    )

    stats = customs.stats(timeline=False)
    assert stats["distinct_keys"] == len(submitted)
    assert stats["suspensions"] == 0
    assert len(DeadLetterQueue(client, prefix=prefix)) == 0
    assert ParkingLot(client, prefix=prefix).depth() == 0
    assert gate.state().policy.rate <= HIDDEN_RATE * 1.5  # never a full factor above it
