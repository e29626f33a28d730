"""Each decision kind, emitted by the real code path, is captured with its fields.

Real Redis for the gate, the DLQ, the parking lot and the quarantine; a real customs
sim for the downstream's answers; the lifecycle's own driver with the in-memory engine
of ``tests/lifecycle``. The captures are typed values, so these assertions read fields,
not log lines — and the log level plays no part (it is ERROR throughout).
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from tidegate.delivery import LifecyclePolicy, Stores, deliver
from tidegate.downstream import DownstreamClient
from tidegate.edi.classify import DocumentClass
from tidegate.errors import DownstreamThrottled, Throttled
from tidegate.events import (
    DocumentShed,
    DownstreamAnswered429,
    Event,
    GatePaused,
    GateResumed,
    GateThrottled,
    LetterReplayed,
    LetterResolved,
    MessageParked,
    UnitDeadLettered,
    capture_events,
)
from tidegate.flow import Gate
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.load import DeadLetterQueue, DeliveryLedger
from tidegate.load.admission import Admission, Inbound, Outcome
from tidegate.load.quarantine import Quarantine
from tidegate.load.replay import replay_dead_letters
from tidegate.load.shedding import SheddingPolicy
from tidegate.load.watermarks import Watermarks, WatermarkStore
from tidegate.logging import configure, key_hash
from tidegate.sim import CustomsSim

sys.path.insert(0, str(Path(__file__).parent.parent / "lifecycle"))

from lifecycle_jobs import LOOKUP, MAX_WAIT_S, POLICY, REQUIRED
from memory_engine import MemoryEngine, unit_of, unit_of_letter

pytestmark = pytest.mark.redis


@pytest.fixture(autouse=True)
def _quiet_log() -> None:
    """The log shows nothing below ERROR: the captures must not care."""
    configure(level="ERROR", stream=io.StringIO())


@pytest.fixture
def sim() -> Iterator[CustomsSim]:
    with CustomsSim(rate=100, burst=10) as running:
        yield running


def of(kind: type[Event], events: Sequence[Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_gate_throttles_pauses_and_resumes_are_captured(
    redis_client: redis.Redis, prefix: str
) -> None:
    """A refused try, a refused blocking call, a pause and a resume at a real gate."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=0.001, burst=1)
    with capture_events() as events:
        assert gate.try_acquire().allowed  # admitted: no event
        assert not gate.try_acquire().allowed
        with pytest.raises(Throttled):
            gate.acquire(max_wait=0)
        gate.pause(30.0, "maintenance")
        gate.pause(5.0, "maintenance")  # shorter: the pause's end does not move
        gate.resume()
    tried, refused = of(GateThrottled, events)
    assert (tried.downstream, tried.reason, tried.mode) == ("customs", "rate", "try")
    assert (refused.reason, refused.mode) == ("rate", "refused")
    assert tried.wait_s > 0
    assert tried.tokens_left == 0
    paused, kept = of(GatePaused, events)
    assert (paused.downstream, paused.pause_s, paused.reason) == ("customs", 30.0, "maintenance")
    assert (paused.extended, kept.extended) == (True, False)
    assert kept.until_ms == paused.until_ms
    assert of(GateResumed, events) == [GateResumed("customs")]
    assert [type(e) for e in events] == [
        GateThrottled,
        GateThrottled,
        GatePaused,
        GatePaused,
        GateResumed,
    ]


def test_the_downstreams_429_is_captured(redis_client: redis.Redis, prefix: str) -> None:
    """The sim answers 429: one event naming the call by its key's hash, never the key."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    with CustomsSim(rate=100, burst=5) as sim, capture_events() as events:
        sim.set_fault("429_no_retry_after", count=1)
        client = DownstreamClient("customs", sim.url, feedback=gate)
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", {"type": "VERMAS"}, idempotency_key="BL-0001")
        client.close()
    (answered,) = of(DownstreamAnswered429, events)
    assert (answered.downstream, answered.path, answered.status) == (
        "customs",
        "/declarations",
        429,
    )
    assert answered.key_hash == key_hash("BL-0001")
    assert answered.paused is True  # the 429 paused the gate: a GatePaused came with it
    assert of(GatePaused, events)[0].reason == "http_429"


class _Lifecycle:
    """The lifecycle's driver with the in-memory engine (as ``tests/lifecycle`` builds it)."""

    def __init__(self, client: redis.Redis, prefix: str, sim: CustomsSim) -> None:
        self.gate = Gate(client, "customs", prefix=prefix)
        self.gate.configure(rate=100, burst=10)
        self.http = DownstreamClient("customs", sim.url, feedback=self.gate)
        self.dlq = DeadLetterQueue(client, prefix=prefix)
        self.stores = Stores(self.gate, DeliveryLedger(client, prefix=prefix), self.dlq)
        self.policy = LifecyclePolicy(max_wait_s=MAX_WAIT_S, retry=POLICY)
        self.engine = MemoryEngine(
            body=lambda envelope: self.http.send(
                LOOKUP, envelope, idempotency_key=str(envelope["key"])
            ),
            confirm=lambda key: self.http.lookup(LOOKUP, idempotency_key=key) is not None,
            required_fields=REQUIRED,
        )

    def run(self, envelope: Mapping[str, Any]) -> Any:
        return deliver(self.engine, unit_of(envelope), self.stores, self.policy)


def test_a_unit_the_paused_gate_cannot_admit_is_throttled_then_parked(
    redis_client: redis.Redis, prefix: str, sim: CustomsSim
) -> None:
    """The lifecycle refuses at the paused gate (a ``paused`` throttle) and parks; the
    engine's parking lot (the memory twin of Celery's) records the park."""
    life = _Lifecycle(redis_client, prefix, sim)
    life.gate.pause(120, "maintenance")
    with capture_events() as events:
        outcome = life.run({"key": "parked-1", "type": "VERMAS", "body": "UNH+1+VERMAS'"})
    life.http.close()
    assert outcome["tidegate"] == "parked"
    (throttled,) = of(GateThrottled, events)
    assert (throttled.reason, throttled.mode) == ("paused", "refused")
    (parked,) = of(MessageParked, events)
    assert (parked.task, parked.reason) == (life.engine.parked[0][0].task, outcome["reason"])
    assert life.engine.lot.depth() == 1
    assert parked.delay_s == round(outcome["delay_s"], 3)
    assert sim.accepted_keys() == []


def test_dead_letters_and_their_replay_are_captured_by_key_hash(
    redis_client: redis.Redis, prefix: str, sim: CustomsSim
) -> None:
    """A malformed unit and a refused one are dead-lettered with their reasons; their
    replays are captured too. Keys appear only hashed."""
    life = _Lifecycle(redis_client, prefix, sim)
    sim.reject_keys(["BL-REFUSED"])
    with capture_events() as events:
        life.run({"key": "BL-MALFORMED", "type": "VERMAS"})
        life.run({"key": "BL-REFUSED", "type": "VERMAS", "body": "UNH+1+VERMAS'"})
        sim.reject_keys(())
        republished: list[Any] = []
        replay_dead_letters(life.dlq, republished.append)
        for letter in republished:
            deliver(life.engine, unit_of_letter(letter), life.stores, life.policy)
    life.http.close()
    # The replayed malformed unit is still malformed: dead-lettered again, not lost.
    malformed, refused, again = of(UnitDeadLettered, events)
    assert again.key_hash == malformed.key_hash
    assert malformed.key_hash == key_hash("BL-MALFORMED")
    assert malformed.reason == "malformed unit: envelope lacks 'body'"
    assert malformed.exception == "MalformedUnit"
    assert malformed.event == "task_dead_lettered"
    assert refused.key_hash == key_hash("BL-REFUSED")
    assert refused.reason.startswith("downstream rejected the document (HTTP 422")
    replayed = of(LetterReplayed, events)
    assert {r.key_hash for r in replayed} == {key_hash("BL-MALFORMED"), key_hash("BL-REFUSED")}
    assert all(r.replays == 1 for r in replayed)
    assert sim.accepted_keys() == ["BL-REFUSED"]
    (resolved,) = of(LetterResolved, events)  # only the delivered replay resolves its letter
    assert (resolved.key_hash, resolved.engine) == (key_hash("BL-REFUSED"), "memory")
    for event in events:
        assert "BL-" not in json.dumps(event.log_fields(), default=str)


class _ListSender:
    """Puts a document on the queue's Redis list, where the real depth probe counts it."""

    name = "celery"

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def send(self, queue: str, task: str, payload: Mapping[str, Any]) -> None:
        self.client.rpush(queue, json.dumps({"task": task}))


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_shed_document_is_captured_by_key_hash(redis_client: redis.Redis, prefix: str) -> None:
    """Three samples over the high watermark: the third bulk document is shed."""
    bulk = f"{prefix}:bulk"
    cls = DocumentClass("BULK_BL_PDF", bulk, sheddable=True, critical=False)
    redis_client.rpush(bulk, *["{}"] * 20)
    clock = _Clock()
    admission = Admission(
        _ListSender(redis_client),
        {bulk: "bulk.documents.store"},
        probe=RedisDepthProbe(redis_client),
        quarantine=Quarantine(redis_client, prefix=prefix),
        policy=SheddingPolicy(sheddable={"BULK_BL_PDF"}, classes={"BULK_BL_PDF": cls}),
        watermarks=WatermarkStore(
            redis_client, prefix=prefix, defaults=Watermarks(hwm=10, lwm=2, shed_after=3)
        ),
        board=None,
        interval_s=1.0,
        clock=clock,
        sleep=clock.sleep,
    )
    outcomes = []
    with capture_events() as events:
        for second in range(3):
            clock.now = float(second)
            outcomes.append(admission.submit(Inbound(f"BL-{second}", cls, {"body": "…"})))
    assert [o.outcome for o in outcomes] == [Outcome.QUEUED, Outcome.QUEUED, Outcome.QUARANTINED]
    (shed,) = of(DocumentShed, events)
    assert shed.key_hash == key_hash("BL-2")
    assert (shed.document_class, shed.queue, shed.reason) == (
        "BULK_BL_PDF",
        bulk,
        "sustained_overload",
    )
    assert shed.depth > 10
    assert shed.duplicate is False
