"""Three RabbitMQ nodes on loopback, one cluster, and a quorum queue losing a node.

A port that outgrows one broker runs a RabbitMQ cluster: quorum queues replicate every
message to a majority of nodes before the publisher's confirm, so losing one node of
three loses nothing and the queue keeps serving from a new leader. This module starts
such a cluster from private nodes (:class:`~tidegate.harness.rabbit_node.RabbitNode`:
distinct node names and ports, one Erlang cookie) and provides :class:`NodeLoss`, a
:class:`~tidegate.harness.scenarios.vessel.Disturbance` that SIGKILLs the node leading the
customs queue mid-burst.

The run's clients (producer, workers, depth probe) get a kombu failover URL listing the
nodes (``amqp://…n1;amqp://…n2;amqp://…n0``) with the doomed leader first, so the
queues are declared — and led — there, and every client has somewhere to go when it
dies. The management API is read on the first node, which stays up.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from tidegate.errors import BackendUnavailable, ConfigurationError
from tidegate.harness.rabbit_node import RabbitNode, _new_cookie
from tidegate.harness.run_broker import open_amqp_broker
from tidegate.harness.scenarios.vessel import RunHandles, Submission, VesselConfig, run_vessel_demo
from tidegate.logging import get_logger

__all__ = ["NodeLoss", "RabbitCluster", "run_node_loss"]

log = get_logger("tidegate.ops")


@dataclass
class RabbitCluster:
    """``size`` private nodes joined into one cluster (``size`` >= 3 for a majority
    that survives a node)."""

    size: int = 3
    base: Path | None = None
    cookie: str = field(default_factory=_new_cookie)
    nodes: list[RabbitNode] = field(default_factory=list)

    def start(self) -> RabbitCluster:
        if self.size < 3:
            raise ConfigurationError("a cluster that survives a node needs 3 nodes or more")
        tag = uuid.uuid4().hex[:6]
        self.nodes = [
            RabbitNode(base=self.base, name=f"tg{tag}n{i}", cookie=self.cookie)
            for i in range(self.size)
        ]
        for node in self.nodes:  # boot side by side, then wait for all
            node.launch()
        for node in self.nodes:
            node.wait_ready(300.0)
        for node in self.nodes[1:]:
            node.join(self.nodes[0])
        return self

    def url(self, order: list[int]) -> str:
        """A kombu failover URL over the nodes in ``order`` (vhost ``/``)."""
        return ";".join(self.nodes[i].url() for i in order)

    @property
    def management_url(self) -> str:
        return self.nodes[0].management_url

    def running_nodes(self) -> list[str]:
        """The cluster's running members, as the first node sees them."""
        answer = httpx.get(
            f"http://127.0.0.1:{self.nodes[0].management_port}/api/nodes",
            auth=("guest", "guest"),
            params={"columns": "name,running"},
            timeout=5.0,
        ).json()
        return sorted(str(n["name"]) for n in answer if n.get("running"))

    def queue_info(self, vhost: str, queue: str) -> dict[str, Any]:
        """A quorum queue's leader, members and online members (management API)."""
        url = (
            f"http://127.0.0.1:{self.nodes[0].management_port}/api/queues/"
            f"{quote(vhost, safe='')}/{quote(queue, safe='')}"
        )
        try:
            answer = httpx.get(url, auth=("guest", "guest"), timeout=5.0)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"management API: {type(exc).__name__}") from exc
        data = answer.json() if answer.status_code == 200 else {}
        return {
            "leader": data.get("leader"),
            "members": sorted(data.get("members") or []),
            "online": sorted(data.get("online") or []),
        }

    def cleanup(self) -> None:
        for node in reversed(self.nodes):
            node.kill()  # a clustered node's clean stop waits for its peers; nothing to keep
        for node in self.nodes:
            node.cleanup()


class NodeLoss:
    """SIGKILL the node at ``victim`` (index) ``at_s`` seconds into the burst; it stays
    down. Records the customs queue's leader and members before and after."""

    def __init__(self, cluster: RabbitCluster, vhost: str, *, victim: int, at_s: float) -> None:
        self.cluster = cluster
        self.vhost = vhost
        self.victim = victim
        self.at_s = at_s
        self.killed_at: float | None = None
        self.before: dict[str, Any] = {}
        self.after: dict[str, Any] = {}
        self.backlog_when_killed = 0

    def worker_env(self) -> dict[str, str]:
        return {}

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return burst

    def started(self, run: RunHandles) -> None:
        pass

    def tick(self, run: RunHandles, t: float) -> None:
        if self.killed_at is not None or t < self.at_s:
            return
        self.before = self.cluster.queue_info(self.vhost, "edi.customs")
        if run.broker is not None:
            self.backlog_when_killed = sum(run.broker.depths(["edi.customs", "edi.tos"]).values())
        node = self.cluster.nodes[self.victim]
        node.kill()
        self.killed_at = time.time()
        log.warning("cluster_node_killed", node=node.node, leader=self.before.get("leader"))

    def busy(self, t: float) -> bool:
        return self.killed_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        self.after = self.cluster.queue_info(self.vhost, "edi.customs")
        victim = self.cluster.nodes[self.victim].node
        return {
            "node_killed": victim,
            "killed_the_leader": self.before.get("leader") == victim,
            "backlog_when_killed": self.backlog_when_killed,
            "customs_queue_before": self.before,
            "customs_queue_after": self.after,
            "running_nodes_after": self.cluster.running_nodes(),
        }


def run_node_loss(
    redis_url: str, config: VesselConfig, cluster: RabbitCluster, *, at_s: float
) -> dict[str, Any]:
    """The vessel burst on the cluster; the node leading the customs queue (node 1, the
    first in every client's failover list) is SIGKILLed ``at_s`` into it. Returns the
    report (``report["node_loss"]``: what was killed, the queue before and after)."""
    broker = open_amqp_broker(cluster.url([1, 2, 0]), management_url=cluster.management_url)
    try:
        loss = NodeLoss(cluster, broker.vhost, victim=1, at_s=at_s)
        report, _ = run_vessel_demo(redis_url, config, broker=broker, disturbance=loss)
    finally:
        broker.close()
    report["node_loss"] = report.pop("chaos")
    return report
