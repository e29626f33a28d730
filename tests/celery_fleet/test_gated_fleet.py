"""Real Celery workers behind the gate: pause, parking, dead letters, refusal to start.

Every test taking ``fleet`` runs on both brokers, Redis and RabbitMQ (see conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tidegate.logging import key_hash

pytestmark = [pytest.mark.redis, pytest.mark.celery, pytest.mark.slow]
#: The brokers every ``fleet`` test here runs on (tests/celery_fleet/conftest.py).
FLEET_BROKERS = ("redis", "amqp")


def test_the_fleet_consumes_from_the_broker_it_was_given(fleet: Any) -> None:
    """The parametrization is real: on RabbitMQ every pool's queue has its consumer and
    is the quorum queue the preset declares (a classic re-declaration is refused)."""
    depth = fleet.depth_probe.sample(["edi.customs", "edi.tos", "bl.parse"])
    if fleet.broker == "redis":
        assert {d.consumers for d in depth.values()} == {None}
        return
    from amqp.exceptions import PreconditionFailed
    from kombu import Connection

    assert {q: d.consumers for q, d in depth.items()} == {
        "edi.customs": 1,
        "edi.tos": 1,
        "bl.parse": 1,
    }
    with Connection(fleet.broker_url) as conn, pytest.raises(PreconditionFailed):
        conn.channel().queue_declare(
            "edi.customs", durable=True, arguments={"x-queue-type": "classic"}
        )


#: Worker processes in the customs pool (tests/celery_fleet/conftest.py).
CUSTOMS_PROCESSES = 3
#: How far the sim's wall instants and Redis TIME may disagree: one host, two readings
#: of the same system clock. A clock bound, not a scheduling allowance.
CLOCK_AGREEMENT_S = 0.005


def _json_events(text: str) -> list[dict[str, Any]]:
    """Every JSON object in the workers' logs. The pool's processes append to one file,
    so two events can share a line (one written between the other's text and its
    newline): each line is decoded object by object, not as one document."""
    decoder = json.JSONDecoder()
    events = []
    for line in text.splitlines():
        at = line.find("{")
        while at != -1:
            try:
                event, end = decoder.raw_decode(line, at)
            except json.JSONDecodeError:
                at = line.find("{", at + 1)
                continue
            if isinstance(event, dict):
                events.append(event)
            at = line.find("{", end)
    return events


def _pause_windows(fleet: Any, downstream: str, reason: str) -> list[tuple[float, float]]:
    """Every pause the workers wrote, as ``[start, end)`` on the fleet clock (seconds since
    the epoch), from their ``downstream_gate_paused`` events: a pause that moved the end
    later was written at ``until_ms - pause_s``."""
    windows = []
    for event in _json_events(_worker_logs(fleet)):
        if event.get("event") != "downstream_gate_paused":
            continue
        if (
            event.get("downstream") == downstream
            and event.get("reason") == reason
            and event.get("extended") is True
        ):
            end_s = event["until_ms"] / 1000.0
            windows.append((end_s - event["pause_s"], end_s))
    return sorted(windows)


def test_429_pauses_every_worker(fleet: Any) -> None:
    """A gate set far above the gateway's real rate: each 429 pauses the whole fleet.

    Three worker processes share the customs pool. When a worker writes the pause that a
    429 asks for, the other two may each hold one admission granted just before it, and
    nothing more: inside every pause window the gateway's own record shows at most two
    calls, however late those two arrive — not the stream the gate (50/s) would let
    through. Every document still arrives once.
    """
    fleet.gate("customs").configure(rate=50, burst=5)
    keys = fleet.submit("edi.customs", 12)

    fleet.wait_for(lambda: fleet.settled(len(keys)), timeout_s=90)

    stats = fleet.customs.stats()
    arrivals = [t for t, _ in stats["request_timeline"]]
    assert stats["responses_429"] > 0, "the gate was set above the gateway's rate"
    windows = [
        (start, end)
        for start, end in _pause_windows(fleet, "customs", "http_429")
        if start >= min(arrivals) - CLOCK_AGREEMENT_S  # this test's pauses, not an earlier one's
    ]
    assert windows, "every 429 carried Retry-After: the workers paused the gate"
    for start, end in windows:
        during = [t for t in arrivals if start + CLOCK_AGREEMENT_S < t < end - CLOCK_AGREEMENT_S]
        assert len(during) <= CUSTOMS_PROCESSES - 1, (
            f"{len(during)} calls reached the gateway during the pause [{start}, {end})"
        )
    assert stats["distinct_keys"] == len(keys)
    assert stats["duplicates"] == 0
    assert set(fleet.customs.accepted_keys()) == set(keys)


def test_long_pause_parks_messages_instead_of_holding_them(fleet: Any) -> None:
    """A pause longer than max_wait: messages are parked in Redis, workers hold nothing.

    No ETA/countdown tasks sit in worker memory (`inspect scheduled` is empty), nothing
    is reserved, the queue is empty — and when the pause ends, everything is delivered.
    """
    fleet.gate("customs").pause(6.0, "maintenance")
    keys = fleet.submit("edi.customs", 8)

    fleet.wait_for(lambda: fleet.parking.depth() == len(keys), timeout_s=30)
    scheduled = fleet.inspect("scheduled")
    reserved = fleet.inspect("reserved")
    depth = fleet.depth_probe.sample(["edi.customs"])["edi.customs"]
    fleet.wait_for(lambda: fleet.settled(len(keys)), timeout_s=60)

    assert scheduled, "every worker answers inspect"
    assert all(tasks == [] for tasks in scheduled.values())
    assert all(tasks == [] for tasks in reserved.values())
    assert depth.ready == 0
    if fleet.broker == "redis":
        # RabbitMQ's unacked figure lags by its statistics interval; `reserved` is exact.
        assert depth.unacked == 0
    stats = fleet.customs.stats(timeline=False)
    assert stats["distinct_keys"] == len(keys)
    assert stats["responses_429"] == 0
    assert len(fleet.dlq) == 0


def test_transient_503s_are_retried_with_backoff_not_lost(fleet: Any) -> None:
    """Three 503s: the affected messages are parked with backoff and delivered later."""
    fleet.tos.set_fault("503", count=3)
    keys = fleet.submit("edi.tos", 6)

    fleet.wait_for(lambda: fleet.settled(len(keys)), timeout_s=60)

    stats = fleet.tos.stats(timeline=False)
    assert stats["responses_503"] == 3
    assert stats["distinct_keys"] == len(keys)
    assert stats["duplicates"] == 0
    assert len(fleet.dlq) == 0


def test_rejected_documents_are_dead_lettered_with_the_reason(fleet: Any) -> None:
    """A downstream that refuses documents (422): each lands in the DLQ once, none retried."""
    fleet.tos.set_fault("422", count=2)
    keys = fleet.submit("edi.tos", 5)

    fleet.wait_for(lambda: fleet.settled(len(keys)), timeout_s=120)

    letters = list(fleet.dlq.iter())
    stats = fleet.tos.stats(timeline=False)
    assert len(letters) == 2
    assert {letter.reason for letter in letters} == {
        "downstream rejected the document (HTTP 422 document_rejected)"
    }
    assert {letter.exception for letter in letters} == {"DownstreamRejected"}
    assert all(letter.task == "edi.tos.push" for letter in letters)
    assert all(letter.payload["args"][0]["key"] == letter.key for letter in letters)
    assert stats["responses"].get("422") == 2  # refused once each: never retried
    assert stats["distinct_keys"] == 3
    assert {letter.key for letter in letters} | set(fleet.tos.accepted_keys()) == set(keys)


def test_misconfigured_visibility_timeout_refuses_to_start(redis_url: str) -> None:
    """A visibility timeout below 2 × the hard time limit: the worker exits with the reason."""
    env = {**os.environ, "TIDEGATE_REDIS_URL": redis_url, "TIDEGATE_VISIBILITY_TIMEOUT_S": "300"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tidegate.harness.vessel_app",
            "worker",
            "-Q",
            "edi.customs",
            "-c",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode != 0
    assert "visibility_timeout=300s" in proc.stderr + proc.stdout


def test_pickle_message_is_refused_and_reported(fleet: Any) -> None:
    """A pickle-serialized task never runs: on either broker the worker's discard guard
    dead-letters it with the reason, its bytes kept and never unpickled (Celery alone
    would drop it with only a log line)."""
    with fleet.producer.connection_for_write() as conn:
        producer = conn.Producer(serializer="pickle")
        producer.publish(
            {"task": "edi.tos.push"},
            routing_key="edi.tos",
            exchange="",
            headers={"task": "edi.tos.push", "id": "pickled-1"},
        )

    fleet.wait_for(lambda: fleet.depth("edi.tos") == 0, timeout_s=30)
    fleet.wait_for(lambda: "pickle" in _worker_logs(fleet), timeout_s=30)

    assert fleet.tos.stats(timeline=False)["requests"] == 0
    assert "untrusted content" in _worker_logs(fleet)
    fleet.wait_for(lambda: fleet.dlq.get("pickled-1") is not None, timeout_s=30)
    letter = fleet.dlq.get("pickled-1")
    assert letter.reason == "refused untrusted content (pickle)"
    assert letter.payload["content_type"] == "application/x-python-serialize"
    assert "args" not in letter.payload
    assert len(fleet.dlq) == 1  # one record, not one from the worker and one from the broker


def _worker_logs(fleet: Any) -> str:
    return "".join(p.read_text(errors="replace") for p in fleet.fleet.log_dir.glob("*.log"))


def test_worker_logs_carry_no_payload_or_personal_data(fleet: Any) -> None:
    """The log audit: after real traffic, no line holds EDIFACT, a body or a party name."""
    from tidegate.harness.burst import _SHIPPERS

    keys = fleet.submit("edi.customs", 6) + fleet.submit("edi.tos", 6)
    fleet.wait_for(lambda: fleet.settled(len(keys)), timeout_s=120)

    logs = _worker_logs(fleet)
    decision_lines = [line for line in logs.splitlines() if line.startswith("{")]
    assert decision_lines, "workers log their decisions as JSON lines"
    for marker in ("UNB+", "UNH+", "NAD+", "EQD+", "MEA+", "edifact", *_SHIPPERS):
        assert marker not in logs, f"{marker!r} leaked into a worker log"


@pytest.mark.parametrize("broker", ["redis"], indirect=True)
def test_a_message_the_broker_lost_is_swept_back_and_delivered_once(fleet: Any) -> None:
    """The state a worker main process SIGKILLed between kombu's BRPOP and its unacked
    write leaves behind: the unit is recorded as published, its message is nowhere, and
    the dead worker's beat has stopped. The live workers notice the silence, sweep, and
    republish the unit; it is delivered once. Redis only: RabbitMQ hands a message to a
    consumer and tracks it as unacknowledged in one step, so it has no such gap."""
    from tidegate.harness.burst import vessel_burst
    from tidegate.load.outstanding import Outstanding, OutstandingUnit

    outstanding = Outstanding(fleet.client, prefix=fleet.prefix)
    doc = next(d for d in vessel_burst(40, seed=99) if d.queue == "edi.tos")
    envelope = doc.envelope()
    outstanding.record(
        OutstandingUnit(doc.key, "edi.tos.push", "popped-and-lost", "edi.tos", [envelope], {})
    )
    outstanding.beat("killed-worker", dead_after_s=10, arm_sweeps=0, now_ms=1_000)  # long silent

    fleet.wait_for(lambda: fleet.tos.stats(timeline=False)["distinct_keys"] == 1, timeout_s=60)
    fleet.wait_for(lambda: len(outstanding) == 0, timeout_s=30)

    assert fleet.tos.accepted_keys() == [doc.key]
    logs = _worker_logs(fleet)
    republished = [
        json.loads(line)
        for line in logs.splitlines()
        if line.startswith("{") and '"orphan_republished"' in line
    ]
    mine = [e["lost_task_id"] for e in republished if e["key_hash"] == key_hash(doc.key)]
    assert mine == ["popped-and-lost"]
