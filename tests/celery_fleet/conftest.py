"""One real Celery fleet per broker for the module: pools, simulated customs and TOS.

Starting workers costs seconds, so the fleet is shared by a module's tests; each test
resets the sims, the gates and tidegate's keys, and waits for the queues to drain.

The fleet can run once on Redis and once on RabbitMQ (``broker`` is a module-scoped
parameter, so pytest groups the tests and starts each fleet once). tidegate's own
state — gates, parking, ledger, DLQ — stays on Redis either way: ``TIDEGATE_REDIS_URL``
names it, ``TIDEGATE_BROKER_URL`` the broker. A module opts in with
``FLEET_BROKERS = ("redis", "amqp")``; a test in it that only makes sense on one
broker says so with
``@pytest.mark.parametrize("broker", ["redis"], indirect=True)``.
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
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery import configure
from tidegate.integrations.celery.amqp_topology import AmqpTopology
from tidegate.integrations.celery.depth import probe_from_url
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.load.depth import DepthProbe
from tidegate.sim import CustomsSim, TosSim

TASKS = {"edi.customs": "edi.customs.submit", "edi.tos": "edi.tos.push"}
#: Every queue the vessel app declares (deleted from the broker after the module).
QUEUES = ("edi.customs", "edi.tos", "bulk.dispatch", "bl.parse")
#: The brokers a fleet module can run on (it opts in with ``FLEET_BROKERS``).
BROKERS = ("redis", "amqp")


@dataclass
class Harness:
    """Handles on everything a fleet test touches."""

    url: str
    broker: str
    broker_url: str
    depth_probe: DepthProbe
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
        # A burst's keys depend only on the document's position, so two tests would
        # share keys; a worker still settling the previous test's unit can then write
        # "delivered" into the ledger after the reset, and this test's unit with the
        # same key is skipped as already delivered. A per-call salt keeps tests apart.
        salt = uuid.uuid4().hex[:12]
        for doc in burst:
            if doc.queue != queue:
                continue
            envelope = {**doc.envelope(), "key": f"{doc.key[:48]}-{salt}"}
            self.producer.send_task(TASKS[queue], args=[envelope], queue=queue)
            keys.append(str(envelope["key"]))
            if len(keys) == count:
                return keys
        raise AssertionError("the burst did not contain enough documents")

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Poll `predicate` (a real condition, not a sleep) until true or fail with the
        fleet's state."""
        wait_for(predicate, timeout_s, lambda: f"state: {self.state()}", every_s=0.1)

    def state(self) -> dict[str, Any]:
        """What the fleet looks like, for a failure message."""
        return {
            "customs": self.customs.stats(timeline=False)["responses"],
            "tos": self.tos.stats(timeline=False)["responses"],
            "tos_distinct": self.tos.stats(timeline=False)["distinct_keys"],
            "dlq": [(x.key[:8], x.reason) for x in self.dlq.iter()],
            "parked": self.parking.depth(),
            "queues": {q: d.as_dict() for q, d in self.depth_probe.sample(list(TASKS)).items()},
        }

    def depth(self, queue: str) -> int:
        """Messages in ``queue`` not finished yet, read from the broker: ready + unacked
        (on RabbitMQ the unacked part comes from the management API and lags by its
        statistics interval, so poll it rather than read it once)."""
        return self.depth_probe.sample([queue])[queue].total

    def inspect(self, method: str) -> dict[str, Any]:
        """`celery inspect <method>` over every worker, as {node: result}."""
        result = getattr(self.producer.control.inspect(timeout=2.0), method)()
        return result or {}

    def settled(self, expected: int) -> bool:
        delivered = self.customs.stats(timeline=False)["distinct_keys"]
        delivered += self.tos.stats(timeline=False)["distinct_keys"]
        return delivered + len(self.dlq) >= expected and self.parking.depth() == 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a module's fleet tests on every broker its ``FLEET_BROKERS`` names.

    A module without it runs on Redis only, as before; a test that parametrizes
    ``broker`` itself (a Redis-only behaviour) keeps its own list.
    """
    brokers = getattr(metafunc.module, "FLEET_BROKERS", None)
    if brokers is None or "broker" not in metafunc.fixturenames:
        return
    own = any("broker" in str(m.args[0]) for m in metafunc.definition.iter_markers("parametrize"))
    if not own:
        metafunc.parametrize("broker", brokers, indirect=True, scope="module")


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest) -> str:
    """The broker this module's fleet runs on: ``redis`` unless parametrized."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture(scope="module")
def harness(
    broker: str,
    redis_url: str,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Harness]:
    prefix = f"tgcel-{uuid.uuid4().hex[:8]}"
    client = client_from_url(redis_url)
    # Only the AMQP run needs RabbitMQ: a Redis-only machine still runs the Redis half.
    broker_url = request.getfixturevalue("rabbitmq_url") if broker == "amqp" else redis_url
    if broker == "amqp":
        _delete_amqp_queues(broker_url)  # a crashed run's queues, possibly declared otherwise
    # The gate runs at the gateway's rate with a burst two below its bucket: the slack
    # absorbs transit jitter (see tidegate.harness.scenarios.vessel).
    with CustomsSim(rate=2.0, burst=3) as customs, TosSim(max_connections=2, service_s=0.02) as tos:
        env = {
            "TIDEGATE_REDIS_URL": redis_url,
            "TIDEGATE_BROKER_URL": broker_url,
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
        fleet = Fleet("tidegate.harness.vessel_app", pools, env=env, log_dir=log_dir)
        # Configured like the workers: on RabbitMQ a send_task must declare the queues
        # with the same quorum arguments, or the broker refuses the declaration.
        producer = configure(Celery(broker=broker_url, backend=redis_url, set_as_current=False))
        probe = probe_from_url(broker_url)
        fleet.start()
        try:
            yield Harness(
                redis_url, broker, broker_url, probe, prefix, client, customs, tos, fleet, producer
            )
        finally:
            fleet.stop()
            producer.close()
            probe.close()
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
            if broker == "amqp":
                _delete_amqp_queues(broker_url)
            else:
                client.delete(*QUEUES)
            client.close()


def _delete_amqp_queues(url: str) -> None:
    """Delete the vessel app's queues and the dead-letter exchange and queue."""
    from kombu import Connection

    topology = AmqpTopology()
    with Connection(url) as conn:
        channel = conn.channel()
        for name in (*QUEUES, topology.dead_letter_queue):
            channel.queue_delete(name)
        channel.exchange_delete(topology.dead_letter_exchange)
        channel.close()


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
