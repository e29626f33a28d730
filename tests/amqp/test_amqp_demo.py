"""``tidegate demo --broker amqp://…``: the vessel burst with RabbitMQ as the broker.

The run gets a vhost of its own on the session's RabbitMQ (so it never sees another
run's queues), real Celery workers consume from it, and the report comes from the
per-key reconciliation with the pending keys read from RabbitMQ itself.
"""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from tidegate.cli import cli
from tidegate.errors import BrokerUnreachable
from tidegate.harness.burst import vessel_burst
from tidegate.harness.run_broker import open_amqp_broker, run_broker_for
from tidegate.harness.scenarios.vessel import TASK_FOR_QUEUE, VesselConfig, run_vessel_demo


def test_an_unreachable_broker_is_one_line_naming_the_url_without_its_password() -> None:
    """Nothing listens on port 1: the demo stops before starting anything, with the
    setup errors' exit code and the URL redacted — not a traceback."""
    result = CliRunner().invoke(
        cli, ["demo", "--broker", "amqp://guest:s3cret@127.0.0.1:1/", "--interchanges", "10"]
    )
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: cannot reach the broker amqp://guest:***@127.0.0.1:1/")
    assert "s3cret" not in result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, BrokerUnreachable)  # turned into a CLI error


def test_broker_is_refused_where_a_run_would_not_read_it() -> None:
    result = CliRunner().invoke(
        cli, ["demo", "--scenario", "bulk", "--broker", "amqp://guest:guest@127.0.0.1:1/"]
    )
    assert result.exit_code == 2
    assert "--broker does not apply to --scenario bulk" in result.output
    restart = CliRunner().invoke(
        cli, ["demo", "--chaos", "broker-restart", "--broker", "amqp://127.0.0.1:1/"]
    )
    assert restart.exit_code == 2
    assert "starts (and restarts) its own RabbitMQ node" in restart.output


def test_a_run_vhost_reads_depth_and_pending_keys_and_is_removed(
    rabbitmq_url: str, rabbitmq_management_url: str
) -> None:
    """Without workers, what the intake published is ready in the run's vhost; the
    keys read back (without consuming them) are exactly the published ones; closing
    the run deletes the vhost."""
    broker = open_amqp_broker(rabbitmq_url, management_url=rabbitmq_management_url)
    docs = list(vessel_burst(12, seed=3))
    try:
        producer = broker.producer()
        with producer.connection_for_write() as conn:
            for doc in docs:
                producer.send_task(
                    TASK_FOR_QUEUE[doc.queue],
                    args=[doc.envelope()],
                    queue=doc.queue,
                    connection=conn,
                )
        producer.close()
        depth = broker.depths(list(TASK_FOR_QUEUE))
        first = broker.pending_keys(list(TASK_FOR_QUEUE))
        again = broker.pending_keys(list(TASK_FOR_QUEUE))
    finally:
        broker.close()
    by_queue = {q: sum(1 for d in docs if d.queue == q) for q in TASK_FOR_QUEUE}
    assert {q: depth[q] for q in TASK_FOR_QUEUE} == by_queue
    assert sorted(first) == sorted(d.key for d in docs)
    assert sorted(again) == sorted(first)  # read, not consumed
    vhosts = httpx.get(f"{rabbitmq_management_url}/api/vhosts", timeout=5).json()
    assert broker.vhost not in {v["name"] for v in vhosts}


@pytest.mark.redis
@pytest.mark.celery
def test_the_vessel_burst_on_rabbitmq(
    rabbitmq_url: str, rabbitmq_management_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small burst end to end: every key delivered once, nothing pending in the
    broker, customs never answered 429, and the report says which broker carried it."""
    monkeypatch.setenv("RABBITMQ_MANAGEMENT_URL", rabbitmq_management_url)
    config = VesselConfig(interchanges=120, customs_rate=10.0, customs_burst=3, timeout_s=120)
    with run_broker_for(rabbitmq_url) as broker:
        assert broker is not None
        report, samples = run_vessel_demo(redis_url, config, broker=broker)
    assert report["broker"] == "amqp"
    assert (report["submitted"], report["delivered"]) == (120, 120)
    assert (report["lost"], report["pending"], report["accepted_twice"]) == (0, 0, 0)
    assert report["duplicates"] == 0
    assert report["downstreams"]["customs"]["responses_429"] == 0
    # The samples' depths came from RabbitMQ: the backlog was seen, then drained.
    assert max(s.depth["edi.customs"] + s.depth["edi.tos"] for s in samples) > 0
