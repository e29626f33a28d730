"""A real fleet on a Redis that fills up (``maxmemory`` + ``noeviction``) mid-burst.

The broker, the gates, the ledger and the DLQ all live in one small Redis. While it
refuses writes the workers must wait — no exit ("Unrecoverable error:
OutOfMemoryError"), no dead letter, no lost message — and resume once it is freed.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.load import DeadLetterQueue
from tidegate.redis_server import EmbeddedRedis
from tidegate.sim import TosSim

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

DOCUMENTS = 200
#: How long Redis stays full, seconds (the issue's incident lasted 25 s).
FULL_FOR_S = 8.0
PREFIX = "tgfull"
_FILL_SIZES = (65536, 4096, 256, 16)


def _fill(client: redis.Redis, start: int) -> int:
    """Write filler until even a tiny write is refused; returns the next filler index."""
    index = start
    for size in _FILL_SIZES:
        while True:
            try:
                client.set(f"filler:{index}", b"f" * size)
            except redis.exceptions.OutOfMemoryError:
                break
            index += 1
    return index


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fleet, str, TosSim]]:
    with (
        EmbeddedRedis(maxmemory=16 * 2**20) as server,
        TosSim(max_connections=2, service_s=0.02) as tos,
    ):
        env = {
            "TIDEGATE_REDIS_URL": server.url,
            "TIDEGATE_PREFIX": PREFIX,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_TOS_RATE": "60",
            "TIDEGATE_TOS_BURST": "5",
            "TIDEGATE_TOS_CONCURRENCY": "2",
            "TIDEGATE_MAX_WAIT_S": "1.5",
            "TIDEGATE_LOG_LEVEL": "INFO",
            "TIDEGATE_SWEEP_INTERVAL_S": "2",
        }
        log_dir: Path = tmp_path_factory.mktemp("full-redis-logs")
        pools = [
            Pool("tos-a", ["edi.tos"], concurrency=2),
            Pool("tos-b", ["edi.tos"], concurrency=2),
        ]
        fleet = Fleet("tidegate.harness.vessel_app", pools, env=env, log_dir=log_dir)
        fleet.start()
        try:
            yield fleet, server.url, tos
        finally:
            fleet.stop()


def test_a_full_redis_makes_the_fleet_wait_and_resume_losing_nothing(
    small_fleet: tuple[Fleet, str, TosSim],
) -> None:
    """Redis full for a while mid-burst: every document is delivered exactly once,
    none is dead-lettered, and each worker's main process is the one it started with."""
    fleet, url, tos = small_fleet
    client = client_from_url(url)
    producer = Celery(broker=url)
    pids = fleet.main_pids()
    keys: list[str] = []
    for doc in vessel_burst(DOCUMENTS * 4, seed=13):
        if doc.queue == "edi.tos" and len(keys) < DOCUMENTS:
            producer.send_task("edi.tos.push", args=[doc.envelope()], queue="edi.tos")
            keys.append(doc.key)
    producer.close()
    assert len(keys) == DOCUMENTS

    deadline = time.monotonic() + 30
    while len(tos.accepted_keys()) < DOCUMENTS // 5:
        assert time.monotonic() < deadline, "the fleet did not start delivering"
        time.sleep(0.05)
    filled = _fill(client, 0)
    full_until = time.monotonic() + FULL_FOR_S
    while time.monotonic() < full_until:
        filled = _fill(client, filled)  # what an ack frees is taken again
        time.sleep(0.2)
    accepted_while_full = len(tos.accepted_keys())
    alive_while_full = fleet.main_pids()
    client.delete(*[f"filler:{i}" for i in range(filled)])

    deadline = time.monotonic() + 90
    while len(set(tos.accepted_keys())) < DOCUMENTS and time.monotonic() < deadline:
        time.sleep(0.2)

    # The TOS accepting the last key is not the end of its task: the ledger mark and
    # the ack follow. Wait for the acks (each removes its message from ``unacked``).
    deadline = time.monotonic() + 30
    while client.hlen("unacked") and time.monotonic() < deadline:
        time.sleep(0.2)

    accepted = collections.Counter(tos.accepted_keys())
    dead = [
        (letter.key[:12], letter.reason) for letter in DeadLetterQueue(client, prefix=PREFIX).iter()
    ]
    assert alive_while_full == pids, "a worker main process exited while Redis was full"
    assert accepted_while_full < DOCUMENTS, "Redis was freed before the burst ended"
    assert dead == []
    assert set(accepted) == set(keys)
    assert [key for key, n in accepted.items() if n > 1] == []
    assert fleet.main_pids() == pids
    assert client.llen("edi.tos") == 0
    assert client.hlen("unacked") == 0
    client.close()


def test_a_read_only_broker_after_a_failover_makes_workers_wait_and_resume(
    tmp_path: Path,
) -> None:
    """The broker's address answers READONLY for a while (the old primary demoted by a
    failover): the worker keeps reconnecting instead of exiting, and takes work again
    once the address is writable. (Its data goes with the replica's sync, so the
    burst is sent after the switch back.)"""
    with (
        EmbeddedRedis() as server,
        EmbeddedRedis() as primary,
        TosSim(max_connections=2, service_s=0.01) as tos,
    ):
        env = {
            "TIDEGATE_REDIS_URL": server.url,
            "TIDEGATE_PREFIX": PREFIX,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_TOS_RATE": "100",
            "TIDEGATE_TOS_BURST": "5",
            "TIDEGATE_LOG_LEVEL": "INFO",
        }
        fleet = Fleet(
            "tidegate.harness.vessel_app",
            [Pool("tos", ["edi.tos"], concurrency=2)],
            env=env,
            log_dir=tmp_path,
        )
        client = client_from_url(server.url)
        fleet.start()
        try:
            pids = fleet.main_pids()
            client.replicaof("127.0.0.1", primary.port)
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                assert fleet.main_pids() == pids, "the worker exited on READONLY"
                time.sleep(0.2)
            client.replicaof("NO", "ONE")

            producer = Celery(broker=server.url)
            documents = [doc for doc in vessel_burst(200, seed=21) if doc.queue == "edi.tos"][:20]
            for doc in documents:
                producer.send_task("edi.tos.push", args=[doc.envelope()], queue="edi.tos")
            producer.close()
            keys = [doc.key for doc in documents]
            deadline = time.monotonic() + 60
            while not set(keys) <= set(tos.accepted_keys()) and time.monotonic() < deadline:
                time.sleep(0.2)

            assert set(keys) <= set(tos.accepted_keys())
            assert fleet.main_pids() == pids
        finally:
            fleet.stop()
            client.close()
