"""Prometheus gauges for the adaptive controllers: what each downstream's fleet learned.

Read from Redis at scrape time like every tidegate metric (the controller's state hash,
written by whichever worker holds its lease), so any process serves the same numbers:

=================================  ===============================================
``tidegate_adaptive_rate``         the learned rate the gate runs at, calls/s
``tidegate_adaptive_ceiling``      the ceiling under the last 429 (suspension-prone
                                   downstreams that met one), calls/s
``tidegate_adaptive_concurrency``  the learned fleet-wide concurrency (leases)
``tidegate_adaptive_controller``   1 while a worker holds the controller's lease
=================================  ===============================================
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidegate._redis import text
from tidegate.flow.adaptive import RedisAdaptiveStore
from tidegate.keys import Keyspace

__all__ = ["AdaptiveCollector", "adaptive_downstreams"]


def adaptive_downstreams(client: redis.Redis, prefix: str) -> list[str]:
    """The downstreams whose controller has learned something under ``prefix``."""
    keyspace = Keyspace(prefix)
    names = set()
    for raw in client.scan_iter(match=keyspace.adaptive_states(), count=200):
        name = keyspace.adaptive_name(text(raw))
        if name is not None:
            names.add(name)
    return sorted(names)


class AdaptiveCollector(Collector):
    """The adaptive gauges for every downstream with a learned state."""

    def __init__(self, client: redis.Redis, *, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.store = RedisAdaptiveStore(client)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rate = GaugeMetricFamily(
            "tidegate_adaptive_rate", "Learned rate, calls/s.", labels=["downstream"]
        )
        ceiling = GaugeMetricFamily(
            "tidegate_adaptive_ceiling",
            "Ceiling under the last 429, calls/s.",
            labels=["downstream"],
        )
        concurrency = GaugeMetricFamily(
            "tidegate_adaptive_concurrency", "Learned concurrency.", labels=["downstream"]
        )
        led = GaugeMetricFamily(
            "tidegate_adaptive_controller",
            "1 while a controller is elected.",
            labels=["downstream"],
        )
        for name in adaptive_downstreams(self.client, self.prefix):
            keys = Keyspace(self.prefix).adaptive(name)
            record = self.store.load(keys)
            if record.rate is not None:
                rate.add_metric([name], record.rate.rate)
                if record.rate.ceiling is not None:
                    ceiling.add_metric([name], record.rate.ceiling)
            if record.concurrency is not None:
                concurrency.add_metric([name], record.concurrency.concurrency)
            led.add_metric([name], int(self.store.leader(keys) is not None))
        yield from (rate, ceiling, concurrency, led)
