"""One behaviour suite, four engines: the unit lifecycle behaves the same everywhere.

Each test runs over the in-memory engine, real Celery workers on the Redis broker and
on RabbitMQ (``celery-amqp``), and real RQ workers
(the ``engine`` fixture, see ``conftest.py``), against a real customs sim whose own
record of accepted keys is the judge.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tidegate.load import DeliveryLedger, DeliveryState
from tidegate.sim import CustomsSim

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def envelope(key: str, **extra: Any) -> dict[str, Any]:
    return {"key": key, "type": "VERMAS", "body": "UNH+1+VERMAS'", **extra}


def fleet_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def test_a_delivered_unit_is_delivered_once_and_recorded(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The plain path: the downstream takes it once, the ledger says delivered."""
    engine.run(envelope("plain-1"))
    assert sim.accepted_keys() == ["plain-1"]
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    assert ledger.state("customs", "plain-1") is DeliveryState.DELIVERED


def test_the_ledger_skips_a_unit_the_downstream_already_accepted(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """A unit whose key the ledger has as delivered (a redelivery, a double publish)
    never reaches the downstream again."""
    DeliveryLedger(redis_client, prefix=prefix).mark("customs", "skip-1")
    outcome = engine.run(envelope("skip-1"))
    assert outcome == {"tidegate": "already_delivered"}
    assert sim.accepted_keys() == []


def test_a_unit_killed_mid_call_is_confirmed_by_lookup_not_sent_twice(
    engine: Any, sim: CustomsSim, straggler: Any, redis_client: redis.Redis, prefix: str
) -> None:
    """The worker dies after the downstream took the call, before anything was
    recorded; the engine gives the unit back, the lifecycle finds the ledger at
    ``sending``, asks the downstream, and does not send again. How the unit comes back
    is the broker's (Redis: visibility timeout and restore sweep; RabbitMQ: requeued
    when the connection closes, checked in the harness); the outcome is the same."""
    sim.set_stragglers(60, count=1)
    outcome = engine.run_killed_mid_call(envelope("killed-1"), straggler.release)
    assert outcome == {"tidegate": "already_delivered"}
    assert sim.accepted_keys() == ["killed-1"]
    assert sim.stats(timeline=False)["duplicates"] == 0
    ledger = DeliveryLedger(redis_client, prefix=prefix)
    assert ledger.state("customs", "killed-1") is DeliveryState.DELIVERED


def test_a_malformed_unit_is_dead_lettered_with_the_reason_before_the_gate(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """An envelope without a body costs the downstream nothing; its letter says why and
    which engine it belongs to."""
    outcome = engine.run({"key": "malformed-1", "type": "VERMAS"})
    assert outcome == {
        "tidegate": "dead_lettered",
        "reason": "malformed unit: envelope lacks 'body'",
    }
    letter = engine.dlq.get("malformed-1")
    assert letter is not None
    assert (letter.engine, letter.exception) == (engine.name, "MalformedUnit")
    assert sim.accepted_keys() == []


def test_a_unit_the_gate_cannot_admit_is_parked_not_held(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The fleet is paused longer than the unit may wait in place: it is parked, with
    no attempt spent, and nothing reaches the downstream."""
    engine.gate.pause(120, "maintenance")
    outcome = engine.run(envelope("parked-1"))
    assert outcome["tidegate"] == "parked"
    assert outcome["reason"].startswith("gate_")
    assert engine.parked() == ["parked-1"]
    assert sim.accepted_keys() == []
    assert len(engine.dlq) == 0


def test_a_refused_document_is_dead_lettered_and_a_replay_resolves_the_letter(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The downstream refuses the document (422): dead-lettered at once with the
    reason. Once the reference data is fixed, ``tidegate dlq replay`` hands the letter
    back to its own engine; delivery removes the letter."""
    sim.reject_keys(["refused-1"])
    outcome = engine.run(envelope("refused-1"))
    assert outcome["tidegate"] == "dead_lettered"
    dlq = engine.dlq
    letter = dlq.get("refused-1")
    assert letter is not None
    assert letter.reason.startswith("downstream rejected the document (HTTP 422")
    assert letter.engine == engine.name
    sim.reject_keys(())
    engine.replay("refused-1")
    assert dlq.get("refused-1") is None
    assert sim.accepted_keys() == ["refused-1"]


def test_attempts_spent_dead_letter_only_past_the_horizon(
    engine: Any, sim: CustomsSim, redis_client: redis.Redis, prefix: str
) -> None:
    """The downstream is down. A unit that has spent its attempts but has been failing
    for less than the horizon (600 s) is parked; one failing for longer is
    dead-lettered, the horizon measured on the fleet clock."""
    sim.set_outage(None)
    now = fleet_now(redis_client)
    young = engine.run(envelope("young-1"), attempt=5, first_failed_at=now - 30)
    old = engine.run(envelope("old-1"), attempt=5, first_failed_at=now - 700)
    assert (young["tidegate"], young["reason"]) == ("parked", "downstream_unavailable")
    assert old == {
        "tidegate": "dead_lettered",
        "reason": "retries exhausted after 6 attempts (DownstreamUnavailable)",
    }
    assert engine.parked() == ["young-1"]
    letter = engine.dlq.get("old-1")
    assert letter is not None
    assert letter.attempts == 6
