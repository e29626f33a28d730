"""The chaos scenarios on RabbitMQ: what changes when the broker is not Redis.

``tidegate demo --chaos <kind> --broker amqp://…`` runs the vessel burst of
:mod:`tidegate.harness.chaos` with RabbitMQ carrying the messages, in a vhost of the run's
own (:mod:`tidegate.harness.run_broker`); tidegate's state stays on the run's embedded
Redis. The same per-key reconciliation decides: lost 0, accepted twice 0.

``kill-workers``
    As on Redis — SIGKILL pool children and worker main processes — minus the one
    thing that cannot happen here: kombu's Redis transport can lose a message between
    its ``BRPOP`` and its ``unacked`` write, so the Redis scenario steals one message
    per killed main and checks the orphan sweep gives it back. RabbitMQ tracks every
    delivery per channel until it is acknowledged and requeues it the moment the
    consumer's connection closes: there is no such window, no visibility timeout to
    wait out, no sweep. Those two checks are replaced by the broker's own figure of
    redeliveries being no reason for a loss or a second acceptance.
``broker-restart``
    Starts its own RabbitMQ node (:class:`~tidegate.harness.rabbit_node.RabbitNode`; never
    a shared broker), SIGKILLs it mid-burst — a crash, not a shutdown — keeps it down
    for ``fault_s`` and boots it again on the same data. Quorum queues are durable and
    the intake's publishes were confirmed, so every message is on disk. Tasks running
    at the crash finish (``worker_cancel_long_running_tasks_on_connection_loss`` is
    off); their acknowledgements are lost with the connection, the broker redelivers
    them, and the delivery ledger — on Redis, untouched — skips what was delivered.
``downstream-outage``
    The Redis scenario unchanged: the broker is not what fails.

The other kinds (Redis restarts, slow downstreams, poison) are about Redis or the
downstreams and run on the Redis broker only.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidegate.errors import BackendError, ConfigurationError
from tidegate.harness.chaos.config import ChaosConfig
from tidegate.harness.chaos.downstream_outage import _DownstreamOutage
from tidegate.harness.chaos.kill_workers import _KillWorkers
from tidegate.harness.chaos.scenario import _Scenario
from tidegate.harness.chaos.verdict import Check, _check, _reconciled
from tidegate.harness.rabbit_node import RabbitNode
from tidegate.harness.run_broker import AmqpRunBroker, open_amqp_broker
from tidegate.logging import get_logger

if TYPE_CHECKING:
    from tidegate.harness.scenarios.vessel import RunHandles

__all__ = [
    "AMQP_KINDS",
    "AmqpChaosRun",
    "AmqpKillWorkers",
    "BrokerRestart",
    "amqp_chaos_run",
    "amqp_scenario",
]

log = get_logger("tidegate.ops")

#: The chaos kinds that run with RabbitMQ as the broker.
AMQP_KINDS = frozenset({"kill-workers", "broker-restart", "downstream-outage"})
#: Checks of the Redis ``kill-workers`` scenario about kombu's Redis transport only.
_REDIS_ONLY_CHECKS = frozenset({"lost_messages_swept_back", "redelivery_within_visibility"})


@dataclass
class AmqpChaosRun:
    """The broker of one chaos run, and the private node when the run started one."""

    broker: AmqpRunBroker
    node: RabbitNode | None = None


@contextlib.contextmanager
def amqp_chaos_run(config: ChaosConfig, broker_url: str | None) -> Iterator[AmqpChaosRun | None]:
    """The run's RabbitMQ, or ``None`` when the scenario runs on the Redis broker.

    ``broker-restart`` always starts a private node (it kills it); the others use a
    vhost of their own on ``broker_url``.

    Raises:
        ConfigurationError: a kind that does not run on RabbitMQ was given a broker.
        BrokerUnreachable: ``broker_url`` cannot be reached (before anything starts).
    """
    if config.kind == "broker-restart" and broker_url is not None:
        raise ConfigurationError("broker-restart starts its own RabbitMQ node; give no broker")
    if broker_url is None and config.kind != "broker-restart":
        yield None
        return
    if config.kind not in AMQP_KINDS:
        raise ConfigurationError(
            f"chaos {config.kind} runs on the Redis broker only; on RabbitMQ: "
            f"{', '.join(sorted(AMQP_KINDS))}"
        )
    with contextlib.ExitStack() as stack:
        node: RabbitNode | None = None
        management: str | None
        if broker_url is None:
            node = RabbitNode()
            stack.callback(node.cleanup)
            node.start()
            url, management = node.url(), node.management_url
        else:
            url, management = broker_url, os.environ.get("RABBITMQ_MANAGEMENT_URL")
        broker = open_amqp_broker(url, management_url=management)
        stack.callback(broker.close)
        yield AmqpChaosRun(broker, node)


def amqp_scenario(config: ChaosConfig, log_dir: Path | None, run: AmqpChaosRun) -> _Scenario:
    """The scenario object of ``config.kind`` for a RabbitMQ run."""
    if config.kind == "kill-workers":
        return AmqpKillWorkers(config, log_dir)
    if config.kind == "broker-restart":
        if run.node is None:
            raise ConfigurationError("broker-restart needs the run's own RabbitMQ node")
        return BrokerRestart(config, log_dir, run.node)
    return _DownstreamOutage(config, log_dir)


def _accepted_twice_check(report: dict[str, Any]) -> Check:
    twice = report["accepted_twice"]
    return _check(
        "accepted_twice_zero",
        twice == 0,
        twice,
        0,
        "keys the downstreams accepted more than once, from the per-key reconciliation",
    )


class AmqpKillWorkers(_KillWorkers):
    """``kill-workers`` on RabbitMQ (see the module docstring)."""

    def _steal_one(self, run: RunHandles, pool: str, t: float) -> None:
        """No window to simulate: RabbitMQ holds a delivery until it is acked and
        requeues it when the killed main's connection closes."""

    def checks(self, report: dict[str, Any]) -> list[Check]:
        kept = [c for c in super().checks(report) if c.name not in _REDIS_ONLY_CHECKS]
        return [*kept, _accepted_twice_check(report)]


class BrokerRestart(_Scenario):
    """SIGKILL the run's RabbitMQ node at ``fault_at_s``; boot it ``fault_s`` later."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None, node: RabbitNode) -> None:
        super().__init__(config, log_dir)
        self.node = node
        self.killed_at: float | None = None
        self.restarted_at: float | None = None
        self.backlog_when_killed = 0
        self.boot_s = 0.0

    def tick(self, run: RunHandles, t: float) -> None:
        cfg = self.config
        if self.killed_at is None and t >= cfg.fault_at_s:
            self.backlog_when_killed = self._backlog(run)
            self.node.kill()
            self.killed_at = time.time()
            self.timeline.append({"t": round(t, 2), "event": "broker_killed"})
            log.warning("chaos_broker_killed", node=self.node.node)
        elif (
            self.restarted_at is None
            and self.killed_at is not None
            and t >= cfg.fault_at_s + cfg.fault_s
        ):
            # Blocks the sampler for the boot (seconds): nothing to sample meanwhile.
            started = time.monotonic()
            self.node.start()
            self.boot_s = time.monotonic() - started
            self.restarted_at = time.time()
            self.timeline.append({"t": round(t, 2), "event": "broker_started"})
            log.warning("chaos_broker_started", node=self.node.node, boot_s=round(self.boot_s, 2))

    @staticmethod
    def _backlog(run: RunHandles) -> int:
        """Messages in the broker just before the crash (ready + unacked)."""
        if run.broker is None:
            return 0
        try:
            return sum(run.broker.depths(["edi.customs", "edi.tos"]).values())
        except (BackendError, OSError):
            return 0

    def busy(self, t: float) -> bool:
        return self.restarted_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        data.update(
            broker_down_s=round((self.restarted_at or 0.0) - (self.killed_at or 0.0), 2),
            broker_boot_s=round(self.boot_s, 2),
            backlog_when_killed=self.backlog_when_killed,
            reconciled=_reconciled(self.log_dir),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        data = report["chaos"]
        return [
            *super().checks(report),
            _accepted_twice_check(report),
            _check(
                "broker_crashed_with_a_backlog",
                self.restarted_at is not None and data["backlog_when_killed"] > 0,
                data["backlog_when_killed"],
                "> 0",
                "messages in the broker (ready + unacked) when it was SIGKILLed",
            ),
            _check(
                "customs_no_429",
                report["downstreams"]["customs"]["responses_429"] == 0,
                report["downstreams"]["customs"]["responses_429"],
                0,
            ),
        ]
