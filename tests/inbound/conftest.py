"""Fixtures of the inbound-controls tests: unique queues, a Celery producer, polling.

Broker queues get names under the test's key prefix (``<prefix>:bulk``), so the
``redis_client`` fixture's cleanup removes them with their priority sub-lists, and a
test never sees another test's messages. kombu's ``unacked`` hash is shared by every
queue of the database: entries of this test's queues are removed afterwards, so a
consumer that held messages cannot leak them into another suite's depth readings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import redis
from celery import Celery

from tidegate.edi.classify import DocumentClass
from tidegate.harness.polling import wait_for
from tidegate.integrations.celery import configure


@pytest.fixture
def poll() -> Callable[..., None]:
    """:func:`~tidegate.harness.polling.wait_for`, as a fixture."""
    return wait_for


@pytest.fixture
def queues(prefix: str) -> dict[str, str]:
    """This test's broker queue names."""
    return {"bulk": f"{prefix}:bulk", "customs": f"{prefix}:customs"}


@pytest.fixture
def classes(queues: dict[str, str]) -> dict[str, DocumentClass]:
    """Document classes like the real ones, routed to this test's queues."""
    return {
        "BULK_BL_PDF": DocumentClass("BULK_BL_PDF", queues["bulk"], sheddable=True, critical=False),
        "VERMAS": DocumentClass("VERMAS", queues["customs"], sheddable=False, critical=True),
    }


@pytest.fixture
def producer(redis_url: str, redis_client: redis.Redis, queues: dict[str, str]) -> Iterator[Celery]:
    """A Celery producer on the test Redis, with tidegate's preset."""
    app = Celery("tidegate-test-producer", broker=redis_url)
    configure(app)
    try:
        yield app
    finally:
        app.close()
        wanted = set(queues.values())
        for tag, raw in list(redis_client.hscan_iter("unacked", count=500)):
            try:
                _, _exchange, routing_key = json.loads(raw)
            except ValueError:
                continue
            if routing_key in wanted:
                redis_client.hdel("unacked", tag)
                redis_client.zrem("unacked_index", tag)
        for queue in wanted:
            redis_client.delete(f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


@dataclass
class Ctx:
    """What most inbound tests touch, in one fixture."""

    client: redis.Redis
    prefix: str
    producer: Celery
    queues: dict[str, str]
    classes: dict[str, DocumentClass]

    def fill(self, queue: str, count: int) -> None:
        """Publish ``count`` real Celery messages to ``queue``."""
        for _ in range(count):
            self.producer.send_task("filler", args=[{}], queue=queue)


@pytest.fixture
def ctx(
    redis_client: redis.Redis,
    prefix: str,
    producer: Celery,
    queues: dict[str, str],
    classes: dict[str, DocumentClass],
) -> Ctx:
    return Ctx(redis_client, prefix, producer, queues, classes)
