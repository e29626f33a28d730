"""The chaos scenarios with RabbitMQ as the broker, trimmed, with real processes.

``kill-workers`` and ``downstream-outage`` run in a vhost of their own on the session's
RabbitMQ; ``broker-restart`` starts a private RabbitMQ node (never the shared one) and
SIGKILLs it mid-burst. Each run has its own embedded Redis for tidegate's state. The
verdict is the per-key reconciliation: lost 0, pending 0, accepted twice 0.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tidegate.errors import ConfigurationError
from tidegate.harness.chaos import preset, run_chaos
from tidegate.harness.rabbit_node import rabbitmq_installed
from tidegate.redis_server import find_redis_server

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]

CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def redis_binary() -> str:
    try:
        return find_redis_server()
    except ConfigurationError as exc:
        if CI:
            raise
        pytest.skip(f"no redis-server binary: {exc}")


@pytest.fixture
def amqp(rabbitmq_url: str, rabbitmq_management_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's RabbitMQ, its management API named for the run."""
    monkeypatch.setenv("RABBITMQ_MANAGEMENT_URL", rabbitmq_management_url)
    return rabbitmq_url


def _verdict(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    assert report["broker"] == "amqp"
    assert report["lost"] == 0
    assert report["pending"] == 0
    assert report["accepted_twice"] == 0
    assert report["duplicates"] == 0
    assert report["chaos"]["unaccounted_keys"] == []
    checks = {c["name"]: c for c in report["chaos"]["checks"]}
    assert [c for c in checks.values() if not c["ok"]] == []
    return checks


def test_kill_workers_on_rabbitmq(redis_binary: str, amqp: str) -> None:
    """SIGKILL children and mains: RabbitMQ requeues a killed consumer's delivery when
    its connection closes, so no message waits for a timeout and none needs the Redis
    broker's orphan sweep (the scenario steals none; those checks are not run)."""
    report, _ = run_chaos(preset("kill-workers", "test"), broker_url=amqp)
    checks = _verdict(report)
    chaos = report["chaos"]
    assert chaos["kills_by_role"]["main"] >= 1
    assert chaos["kills_by_role"]["child"] >= 1
    assert "lost_messages_swept_back" not in checks
    assert chaos["messages_lost_with_mains"] == 0
    assert chaos["tos_max_concurrent_seen"] <= 4


def test_downstream_outage_on_rabbitmq(redis_binary: str, amqp: str) -> None:
    report, _ = run_chaos(preset("downstream-outage", "test"), broker_url=amqp)
    checks = _verdict(report)
    assert checks["no_retry_storm"]["ok"]
    assert report["chaos"]["calls_in_outage"] >= 1


@pytest.mark.skipif(not rabbitmq_installed() and not CI, reason="rabbitmq-server not installed")
def test_broker_restart(redis_binary: str) -> None:
    """A private RabbitMQ node SIGKILLed with a backlog in its quorum queues and booted
    again on the same data: every message comes back, none is accepted twice."""
    report, _ = run_chaos(preset("broker-restart", "test"))
    _verdict(report)
    chaos = report["chaos"]
    assert chaos["backlog_when_killed"] > 0
    assert chaos["broker_down_s"] >= preset("broker-restart", "test").fault_s


def test_a_redis_only_kind_is_refused_on_rabbitmq(amqp: str) -> None:
    with pytest.raises(ConfigurationError, match="runs on the Redis broker only"):
        run_chaos(preset("poison", "test"), broker_url=amqp)
