"""Publish-side admission against a real Redis broker: shed, block, replay.

Time is a fake clock (sampling intervals, the producer's bounded wait): the broker,
the quarantine and the messages are real.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from tidegate.edi.classify import DocumentClass
from tidegate.errors import ConfigurationError, LoadShed, PayloadTooLarge
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sender import CelerySender
from tidegate.load.admission import Admission, Inbound, Outcome
from tidegate.load.depth import QueueDepth
from tidegate.load.quarantine import Quarantine
from tidegate.load.shedding import SheddingPolicy
from tidegate.load.watermarks import (
    BoardEntry,
    LoadBoard,
    LoadState,
    Watermarks,
    WatermarkStore,
    advance,
)

pytestmark = pytest.mark.redis


class FakeClock:
    """Monotonic seconds that move only when the code under test sleeps (or we say so)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


class CountingProbe:
    """The real Redis probe, counting how often the admission samples."""

    broker = "redis"

    def __init__(self, inner: RedisDepthProbe) -> None:
        self.inner = inner
        self.calls = 0

    def sample(self, queues: Sequence[str]) -> dict[str, QueueDepth]:
        self.calls += 1
        return self.inner.sample(queues)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(ctx: Any, clock: FakeClock) -> Callable[..., Admission]:
    """An admission on this test's queues: HWM 10, LWM 2, shed after 3 samples of 1 s."""

    def build(**options: Any) -> Admission:
        marks = Watermarks(hwm=10, lwm=2, shed_after=3)
        options.setdefault("board", None)
        return Admission(
            CelerySender(ctx.producer),
            {
                ctx.queues["bulk"]: "bulk.documents.store",
                ctx.queues["customs"]: "edi.customs.submit",
            },
            probe=options.pop("probe", CountingProbe(RedisDepthProbe(ctx.client))),
            quarantine=Quarantine(ctx.client, prefix=ctx.prefix),
            policy=SheddingPolicy(sheddable={"BULK_BL_PDF"}, classes=ctx.classes),
            watermarks=WatermarkStore(ctx.client, prefix=ctx.prefix, defaults=marks),
            interval_s=1.0,
            poll_s=0.5,
            clock=clock,
            sleep=clock.sleep,
            **options,
        )

    return build


def inbound(classes: dict[str, DocumentClass], name: str, key: str) -> Inbound:
    return Inbound(key, classes[name], {"key": key, "class": name, "body": "…"})


def test_a_brief_spike_never_sheds_and_sustained_overload_does(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """Two samples over HWM, a dip, two more: all queued. A third consecutive sample:
    the sheddable document is quarantined, the VERMAS queued all along."""
    admission = make()
    bulk = ctx.queues["bulk"]
    ctx.fill(bulk, 20)
    outcomes = []
    for second in range(2):
        clock.now = float(second)
        outcomes += [
            admission.submit(inbound(ctx.classes, "BULK_BL_PDF", f"a{second}{i}")) for i in range(5)
        ]
    ctx.client.delete(bulk)  # the spike is absorbed
    clock.now = 2.0
    outcomes.append(admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "dip")))
    ctx.fill(bulk, 20)
    for second in (3, 4):
        clock.now = float(second)
        outcomes.append(admission.submit(inbound(ctx.classes, "BULK_BL_PDF", f"b{second}")))
    assert all(o.queued for o in outcomes)
    assert admission.load(bulk).over_hwm_intervals == 2  # one sample per interval, not per submit

    ctx.fill(ctx.queues["customs"], 20)
    clock.now = 5.0
    shed = admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "shed-me"))
    vermas = [admission.submit(inbound(ctx.classes, "VERMAS", f"v{i}")) for i in range(3)]

    assert (shed.outcome, shed.reason) == (Outcome.QUARANTINED, "sustained_overload")
    assert shed.depth is not None
    assert shed.depth > 10
    assert all(v.queued for v in vermas)
    assert [d.key for d in admission.quarantine.iter()] == ["shed-me"]
    assert admission.quarantine.stats()["shed_total"] == {"BULK_BL_PDF": 1}


def test_raise_on_shed_still_stores_the_document(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """LoadShed is raised for a caller that wants it; the document is in the quarantine."""
    admission = make()
    ctx.fill(ctx.queues["bulk"], 20)
    for second in range(3):
        clock.now = float(second)
        admission.load(ctx.queues["bulk"])
    with pytest.raises(LoadShed, match="BULK_BL_PDF"):
        admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "k"), raise_on_shed=True)
    assert len(admission.quarantine) == 1


def test_a_blocked_producer_waits_a_bounded_time_then_queues(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """Queue above HWM and nothing draining: the VERMAS waits max_block_s, then is queued
    (never refused), with an admission_wait_expired event."""
    admission = make(block=True, max_block_s=2.0)
    customs = ctx.queues["customs"]
    ctx.fill(customs, 15)
    with capture_logs() as logs:
        result = admission.submit(inbound(ctx.classes, "VERMAS", "v1"))
    assert (result.outcome, result.reason) == (Outcome.QUEUED, "wait_expired")
    assert result.waited_s == pytest.approx(2.0)
    assert ctx.client.llen(customs) == 16
    assert [e["event"] for e in logs if e["event"].startswith("admission")] == [
        "admission_wait_expired"
    ]


def test_a_blocked_producer_resumes_once_the_queue_is_below_hwm(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """The consumer drains the queue while the producer waits: it goes on at once."""
    admission = make(block=True, max_block_s=30.0)
    customs = ctx.queues["customs"]
    ctx.fill(customs, 15)

    def drain() -> None:
        if clock.now >= 1.5:
            for _ in range(10):
                ctx.client.rpop(customs)

    clock.on_sleep = drain
    result = admission.submit(inbound(ctx.classes, "VERMAS", "v1"))
    assert (result.outcome, result.reason) == (Outcome.QUEUED, "admitted_after_wait")
    assert result.waited_s == pytest.approx(1.5)
    assert ctx.client.llen(customs) == 6


def test_a_sheddable_document_waiting_for_room_is_shed_once_overload_is_sustained(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """While blocked, the samples go on: at the third one over HWM it is quarantined."""
    admission = make(block=True, max_block_s=30.0)
    ctx.fill(ctx.queues["bulk"], 15)
    result = admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "b1"))
    assert (result.outcome, result.reason) == (Outcome.QUARANTINED, "sustained_overload")
    assert 2.0 <= result.waited_s <= 3.0


def test_a_fresh_board_decides_without_sampling_and_a_stale_one_is_ignored(
    make: Callable[..., Admission], ctx: Any
) -> None:
    """The monitor's board is the fleet-wide truth while fresh; stale, the admission
    samples the (empty) queue itself and queues the document."""
    board = LoadBoard(ctx.client, prefix=ctx.prefix)
    bulk = ctx.queues["bulk"]
    marks = Watermarks(hwm=10, lwm=2, shed_after=1)
    shedding = advance(LoadState(bulk), 500, marks)
    probe = CountingProbe(RedisDepthProbe(ctx.client))
    board.publish([BoardEntry(shedding, QueueDepth(bulk, 500), marks, None, board.now_ms(), 1.0)])
    admission = make(board=board, probe=probe)
    assert admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "k1")).quarantined
    assert probe.calls == 0

    stale = board.now_ms() - 60_000
    board.publish([BoardEntry(shedding, QueueDepth(bulk, 500), marks, None, stale, 1.0)])
    admission = make(board=board, probe=probe)
    assert admission.submit(inbound(ctx.classes, "BULK_BL_PDF", "k2")).queued
    assert probe.calls == 1


def test_replay_goes_through_the_intake(
    make: Callable[..., Admission], clock: FakeClock, ctx: Any
) -> None:
    """Overloaded again: claimed documents are put back, nothing sent. Drained: each is
    queued with its original payload and task, and counted as replayed."""
    admission = make()
    bulk = ctx.queues["bulk"]
    ctx.fill(bulk, 20)
    for second in range(3):
        clock.now = float(second)
        admission.submit(inbound(ctx.classes, "BULK_BL_PDF", f"k{second}"))
    assert len(admission.quarantine) == 1
    for key in ("x1", "x2"):
        admission.submit(inbound(ctx.classes, "BULK_BL_PDF", key))
    assert len(admission.quarantine) == 3

    still = admission.replay(bulk, 10)
    assert (still.replayed, still.released) == (0, 3)
    assert len(admission.quarantine) == 3

    ctx.client.delete(bulk)
    clock.now = 10.0
    report = admission.replay(bulk, 2)
    assert (report.replayed, dict(report.by_class)) == (2, {"BULK_BL_PDF": 2})
    messages = [json.loads(raw) for raw in ctx.client.lrange(bulk, 0, -1)]
    sent = [json.loads(base64.b64decode(m["body"]))[0][0] for m in messages]
    assert sorted(s["key"] for s in sent) == ["k2", "x1"]
    assert {m["headers"]["task"] for m in messages} == {"bulk.documents.store"}
    assert len(admission.quarantine) == 1
    assert admission.quarantine.stats()["replayed_total"] == {"BULK_BL_PDF": 2}


def test_an_oversized_document_is_refused_before_the_broker(
    ctx: Any, make: Callable[..., Admission]
) -> None:
    """A typed error for the producer to answer its sender; nothing queued or stored."""
    admission = make(max_payload_bytes=2048)
    big = Inbound("VERMAS-BIG", ctx.classes["VERMAS"], {"key": "VERMAS-BIG", "body": "X" * 4096})
    with capture_logs() as logs, pytest.raises(PayloadTooLarge) as refused:
        admission.submit(big)
    assert (refused.value.key, refused.value.limit) == ("VERMAS-BIG", 2048)
    assert refused.value.size > 4096
    assert ctx.client.llen(ctx.queues["customs"]) == 0
    assert len(Quarantine(ctx.client, prefix=ctx.prefix)) == 0
    (event,) = [e for e in logs if e["event"] == "intake_refused"]
    assert event["reason"] == "payload_too_large"
    assert "XXXX" not in json.dumps(event)
    # A document within the limit still goes through the same admission.
    small = inbound(ctx.classes, "VERMAS", "VERMAS-OK")
    assert admission.submit(small).outcome is Outcome.QUEUED


@pytest.mark.parametrize("limit", [0, -5, True])
def test_an_invalid_payload_limit_is_a_configuration_error(
    make: Callable[..., Admission], limit: Any
) -> None:
    with pytest.raises(ConfigurationError):
        make(max_payload_bytes=limit)
