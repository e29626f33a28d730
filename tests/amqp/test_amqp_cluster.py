"""Three RabbitMQ nodes on loopback, one quorum-queue cluster, a node lost mid-burst.

The nodes are private (:class:`~tidegate.harness.rabbit_cluster.RabbitCluster`: their own
names, ports and data, one Erlang cookie), never the machine's shared broker. The node
leading the customs queue is SIGKILLed while the burst drains and stays down: the
queue elects a new leader on the two survivors (a majority), the clients fail over,
and the per-key reconciliation finds nothing lost and nothing accepted twice.
"""

from __future__ import annotations

import os

import pytest

from tidegate.harness.rabbit_cluster import RabbitCluster, run_node_loss
from tidegate.harness.rabbit_node import rabbitmq_installed
from tidegate.harness.scenarios.vessel import VesselConfig

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

pytestmark = [
    pytest.mark.redis,
    pytest.mark.celery,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not rabbitmq_installed() and not CI, reason="rabbitmq-server not installed"),
]


def test_a_quorum_queue_loses_its_leader_mid_burst_and_nothing_is_lost(redis_url: str) -> None:
    cluster = RabbitCluster()
    try:
        cluster.start()
        assert len(cluster.running_nodes()) == 3
        config = VesselConfig(interchanges=200, customs_rate=10.0, timeout_s=300.0)
        report = run_node_loss(redis_url, config, cluster, at_s=3.0)
    finally:
        cluster.cleanup()
    loss = report["node_loss"]
    assert loss["backlog_when_killed"] > 0
    assert loss["killed_the_leader"] is True
    before, after = loss["customs_queue_before"], loss["customs_queue_after"]
    assert len(before["members"]) == 3  # replicated to every node
    assert after["leader"] not in (None, loss["node_killed"])
    assert loss["node_killed"] not in loss["running_nodes_after"]
    assert (report["lost"], report["pending"], report["accepted_twice"]) == (0, 0, 0)
    assert report["delivered"] == report["submitted"] == 200
    assert report["duplicates"] == 0
