"""A fleet that outgrows one host: three "hosts" of workers, one broker, one Redis.

Each host is a separate :class:`~tidegate.harness.celery_fleet.Fleet` whose workers run in
process groups of their own (as on separate machines, where nothing is shared but the
network) with an environment of their own (``HOME``, ``TMPDIR``, a host label); all
consume the same RabbitMQ queue (one vhost of the session's broker) and share one
Redis for the gate. The gate's promise is fleet-wide: across all hosts the customs
gateway accepts at most ``burst + rate × t`` in any window of ``t`` seconds — checked
on the customs simulator's own record of the instants it accepted.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tidegate.harness.burst import vessel_burst
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.run_broker import open_amqp_broker
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

HOSTS = ("h1", "h2", "h3")
RATE, GATE_BURST = 2.0, 2
#: Transit jitter, in tokens: a call admitted at t may reach the gateway late, next to
#: the calls admitted after it. Three tokens are 1.5 s at 2/s — what a 2-CPU machine
#: shared with other test runs needs (at load 30+, 0.75 s was seen exceeded); the
#: gateway's bucket is the gate's plus that slack, so a 429 means the gate let more
#: through than its promise (or a call was held up longer than that in transit).
JITTER_TOKENS = 3
SIM_BURST = GATE_BURST + JITTER_TOKENS
DOCUMENTS = 36


def _over_bound(accepts: list[float]) -> list[tuple[int, float]]:
    """Every window [t_i, t_j] of the sorted accepts holding more than the gate's
    promise plus the transit slack (``GATE_BURST + RATE × (t_j - t_i) + JITTER_TOKENS``)
    — as (count, length)."""
    times = sorted(accepts)
    bad = []
    for i in range(len(times)):
        for j in range(i, len(times)):
            span = times[j] - times[i]
            if j - i + 1 > GATE_BURST + RATE * span + JITTER_TOKENS + 1e-9:
                bad.append((j - i + 1, round(span, 3)))
    return bad


def test_three_hosts_share_one_gate(
    rabbitmq_url: str, rabbitmq_management_url: str, redis_url: str, tmp_path: Path
) -> None:
    broker = open_amqp_broker(rabbitmq_url, management_url=rabbitmq_management_url)
    prefix = f"tghosts-{uuid.uuid4().hex[:8]}"
    fleets: list[Fleet] = []
    try:
        with CustomsSim(rate=RATE, burst=SIM_BURST) as customs:
            for host in HOSTS:
                home = tmp_path / host
                (home / "tmp").mkdir(parents=True)
                env = {
                    "HOME": str(home),
                    "TMPDIR": str(home / "tmp"),
                    "TIDEGATE_HOST_LABEL": host,
                    "TIDEGATE_REDIS_URL": redis_url,
                    "TIDEGATE_BROKER_URL": broker.url,
                    "TIDEGATE_PREFIX": prefix,
                    "TIDEGATE_CUSTOMS_URL": customs.url,
                    "TIDEGATE_TOS_URL": customs.url,
                    "TIDEGATE_CUSTOMS_RATE": repr(RATE),
                    "TIDEGATE_CUSTOMS_BURST": str(GATE_BURST),
                    "TIDEGATE_MAX_WAIT_S": "5",
                }
                fleet = Fleet(
                    "tidegate.harness.vessel_app",
                    [Pool(f"customs-{host}", ["edi.customs"], concurrency=2)],
                    env=env,
                    log_dir=home,
                )
                fleets.append(fleet)
                fleet.start()
            groups = {os.getpgid(pid) for f in fleets for pid in f.main_pids().values()}
            assert len(groups) == len(HOSTS)
            assert os.getpgid(0) not in groups

            keys = _submit(broker.producer(), DOCUMENTS)
            deadline = time.monotonic() + 120
            while customs.stats(timeline=False)["distinct_keys"] < DOCUMENTS:
                assert time.monotonic() < deadline, customs.stats(timeline=False)
                time.sleep(0.2)
            stats = customs.stats()
            per_node = _tasks_per_node(broker.producer())
            accepted = customs.accepted_keys()
    finally:
        for fleet in fleets:
            fleet.stop()
        broker.close()

    assert sorted(set(accepted)) == sorted(keys)
    assert len(accepted) == DOCUMENTS  # each key accepted once
    assert stats["responses_429"] == 0
    assert _over_bound(stats["accept_timeline"]) == []
    # Every host took part (its workers ran tasks), so the bound held across hosts.
    assert {node.split("@")[0] for node, n in per_node.items() if n > 0} == {
        f"customs-{h}" for h in HOSTS
    }


def _submit(producer: Celery, count: int) -> list[str]:
    salt = uuid.uuid4().hex[:10]
    keys = []
    with producer.connection_for_write() as conn:
        for doc in vessel_burst(count * 40, seed=11):
            if doc.queue != "edi.customs":
                continue
            envelope = {**doc.envelope(), "key": f"{doc.key[:40]}-{salt}"}
            producer.send_task(
                "edi.customs.submit", args=[envelope], queue="edi.customs", connection=conn
            )
            keys.append(str(envelope["key"]))
            if len(keys) == count:
                break
    producer.close()
    return keys


def _tasks_per_node(producer: Celery) -> dict[str, int]:
    """Tasks each worker node ran, from Celery's own ``inspect stats``."""
    stats: dict[str, Any] = producer.control.inspect(timeout=3.0).stats() or {}
    producer.close()
    return {node: sum(s.get("total", {}).values()) for node, s in stats.items()}
