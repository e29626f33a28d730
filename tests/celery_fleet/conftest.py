"""One real Celery fleet for the module: two pools, simulated customs and TOS.

Starting workers costs seconds, so the fleet is shared by a module's tests; each test
resets the sims, the gates and tidegate's keys, and waits for the queues to drain.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.flow import Gate
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.ops.burst import vessel_burst
from tidegate.ops.fleet import Fleet, Pool
from tidegate.sim import CustomsSim, TosSim

TASKS = {"edi.customs": "edi.customs.submit", "edi.tos": "edi.tos.push"}


@dataclass
class Harness:
    """Handles on everything a fleet test touches."""

    url: str
    prefix: str
    client: redis.Redis
    customs: CustomsSim
    tos: TosSim
    fleet: Fleet
    producer: Celery

    def gate(self, name: str) -> Gate:
        return Gate(self.client, name, prefix=self.prefix)

    @property
    def parking(self) -> ParkingLot:
        return ParkingLot(self.client, prefix=self.prefix)

    @property
    def dlq(self) -> DeadLetterQueue:
        return DeadLetterQueue(self.client, prefix=self.prefix)

    def submit(self, queue: str, count: int, *, seed: int | None = None) -> list[str]:
        """Submit `count` generated documents of `queue`; return their keys."""
        keys: list[str] = []
        # Customs documents are ~30 % of a burst: 40 per wanted document leaves no
        # realistic chance (a 6-of-36 draw missed about 1 run in 20) of running short.
        burst = vessel_burst(count * 40, seed=seed if seed is not None else time.time_ns())
        for doc in burst:
            if doc.queue != queue:
                continue
            self.producer.send_task(TASKS[queue], args=[doc.envelope()], queue=queue)
            keys.append(doc.key)
            if len(keys) == count:
                return keys
        raise AssertionError("the burst did not contain enough documents")

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Poll `predicate` (a real condition, not a sleep) until true or fail."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError(f"condition not met within {timeout_s}s; state: {self.state()}")

    def state(self) -> dict[str, Any]:
        """What the fleet looks like, for a failure message."""
        return {
            "customs": self.customs.stats(timeline=False)["responses"],
            "tos": self.tos.stats(timeline=False)["responses"],
            "tos_distinct": self.tos.stats(timeline=False)["distinct_keys"],
            "dlq": [(x.key[:8], x.reason) for x in self.dlq.iter()],
            "parked": self.parking.depth(),
            "queues": {q: self.client.llen(q) for q in TASKS},
            "unacked": self.client.hlen("unacked"),
        }

    def inspect(self, method: str) -> dict[str, Any]:
        """`celery inspect <method>` over every worker, as {node: result}."""
        result = getattr(self.producer.control.inspect(timeout=2.0), method)()
        return result or {}

    def settled(self, expected: int) -> bool:
        delivered = self.customs.stats(timeline=False)["distinct_keys"]
        delivered += self.tos.stats(timeline=False)["distinct_keys"]
        return delivered + len(self.dlq) >= expected and self.parking.depth() == 0


@pytest.fixture(scope="module")
def harness(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    prefix = f"tgcel-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    # The gate runs at the gateway's rate with a burst two below its bucket: the slack
    # absorbs transit jitter (see tidegate.ops.vessel_demo).
    with CustomsSim(rate=2.0, burst=3) as customs, TosSim(max_connections=2, service_s=0.02) as tos:
        env = {
            "TIDEGATE_REDIS_URL": redis_url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_CUSTOMS_RATE": "2",
            "TIDEGATE_CUSTOMS_BURST": "1",
            "TIDEGATE_TOS_RATE": "500",
            "TIDEGATE_TOS_BURST": "50",
            "TIDEGATE_TOS_CONCURRENCY": "2",
            "TIDEGATE_MAX_WAIT_S": "1.5",
            "TIDEGATE_LOG_LEVEL": "INFO",
            # A short sweep so a lost message comes back within the test's patience.
            "TIDEGATE_SWEEP_INTERVAL_S": "2",
        }
        pools = [
            Pool("customs", ["edi.customs"], concurrency=3),
            Pool("tos", ["edi.tos"], concurrency=2),
            Pool("bulk", ["bulk.dispatch", "bl.parse"], concurrency=2),
        ]
        log_dir = tmp_path_factory.mktemp("worker-logs")
        fleet = Fleet("tidegate.ops.vessel_app", pools, env=env, log_dir=log_dir)
        producer = Celery(broker=redis_url, backend=redis_url)
        fleet.start()
        try:
            yield Harness(redis_url, prefix, client, customs, tos, fleet, producer)
        finally:
            fleet.stop()
            producer.close()
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.delete("edi.customs", "edi.tos", "bulk.dispatch", "bl.parse")
            client.close()


@pytest.fixture
def fleet(harness: Harness) -> Harness:
    """The shared fleet, reset: sims cleared, all tidegate state in Redis removed."""
    harness.customs.reset()
    harness.tos.reset()
    harness.customs.clear_fault()
    harness.tos.clear_fault()
    # Every piece of tidegate state (gates, ledger, DLQ, parking, batches) starts empty.
    stale = list(harness.client.scan_iter(match=f"{harness.prefix}:*", count=1000))
    if stale:
        harness.client.delete(*stale)
    return harness
