"""The monitor loop against a real Redis broker: samples, signals, gates, lease, replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from structlog.testing import capture_logs

from tidegate.flow import Gate
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sender import CelerySender
from tidegate.load.admission import Admission, Inbound
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.shedding import SheddingPolicy
from tidegate.load.watermarks import LoadBoard, ScalingPolicy, Signal, Watermarks, WatermarkStore
from tidegate.ops.monitor import Monitor, QueueSpec

pytestmark = pytest.mark.redis

MARKS = Watermarks(hwm=10, lwm=2, shed_after=2)


class Ticks:
    """A monotonic clock the test advances one sampling period at a time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make(redis_client: redis.Redis, prefix: str, queues: dict[str, str]) -> Callable[..., Monitor]:
    def build(**options: Any) -> Monitor:
        specs = options.pop(
            "specs", [QueueSpec(queues["bulk"]), QueueSpec(queues["customs"], "customs")]
        )
        return Monitor(
            redis_client,
            RedisDepthProbe(redis_client),
            specs,
            prefix=prefix,
            interval_s=1.0,
            watermarks=WatermarkStore(redis_client, prefix=prefix, defaults=MARKS),
            **options,
        )

    return build


def fill(producer: Celery, queue: str, count: int) -> None:
    for _ in range(count):
        producer.send_task("filler", args=[{}], queue=queue)


def events(logs: list[dict[str, Any]], name: str, queue: str | None = None) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name and (queue is None or e["queue"] == queue)]


def test_each_sample_is_one_event_and_each_change_one_more(
    make: Callable[..., Monitor],
    producer: Celery,
    redis_client: redis.Redis,
    prefix: str,
    queues: dict[str, str],
) -> None:
    """4 ticks × 2 queues = 8 queue_depth_sampled; scaling_signal_changed only when the
    signal changes; shedding_started once, at the shed_after-th sample over HWM."""
    monitor = make()
    bulk = queues["bulk"]
    with capture_logs() as logs:
        monitor.tick()
        fill(producer, bulk, 20)
        for _ in range(3):
            monitor.tick()
    assert len(events(logs, "queue_depth_sampled")) == 8
    changes = [(e["signal"], e["reason"]) for e in events(logs, "scaling_signal_changed", bulk)]
    assert changes == [("scale_in", "drained_to_lwm"), ("scale_out", "above_hwm")]
    (started,) = events(logs, "shedding_started")
    assert (started["queue"], started["over_hwm_intervals"]) == (bulk, 2)
    sampled = events(logs, "queue_depth_sampled", bulk)[-1]
    assert (sampled["depth"], sampled["ready"], sampled["shedding"]) == (20, 20, True)
    assert {"hwm", "lwm", "desired_workers", "level", "signal", "reason"} <= set(sampled)
    board = LoadBoard(redis_client, prefix=prefix).read()
    assert board[bulk].state.shedding
    assert board[bulk].fresh()


def test_a_paused_downstream_makes_scaling_out_pointless(
    make: Callable[..., Monitor],
    producer: Celery,
    redis_client: redis.Redis,
    prefix: str,
    queues: dict[str, str],
) -> None:
    """Queue far over HWM but its gate paused by a 429: hold, reason downstream_paused,
    desired workers capped by what the downstream's rate can use."""
    customs = queues["customs"]
    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=2.0, burst=1)  # live values: what the workers and the monitor read
    gate.pause(60, "http_429")
    policy = ScalingPolicy(backlog_per_worker=10, service_s=1.0)
    monitor = make(specs=[QueueSpec(customs, "customs", policy)])
    fill(producer, customs, 200)
    (entry,) = monitor.tick()
    assert (entry.state.signal, entry.state.reason) == (Signal.HOLD, "downstream_paused")
    assert entry.state.backlog_workers == 20
    assert entry.state.desired_workers == entry.state.quota_workers == 2
    assert entry.gate is not None
    assert entry.gate.paused_for_s > 50


def test_every_lease_held_or_tokens_reserved_ahead_is_a_bottleneck(
    make: Callable[..., Monitor],
    producer: Celery,
    redis_client: redis.Redis,
    prefix: str,
    queues: dict[str, str],
) -> None:
    """Concurrency cap reached: downstream_concurrency. Workers already holding future
    rate slots (the gate's reservation horizon): downstream_rate."""
    bulk, customs = queues["bulk"], queues["customs"]
    tos = Gate(redis_client, "tos", prefix=prefix)
    tos.configure(rate=100, burst=10, concurrency=1)
    held = tos.try_acquire()
    customs_gate = Gate(redis_client, "customs", prefix=prefix)
    customs_gate.configure(rate=1, burst=1)
    for n in range(3):  # three workers reserve the next three slots, as acquire() does
        params = customs_gate.limit.params(1, 10.0, f"worker-{n}")
        assert customs_gate.backend.acquire(customs_gate.limit.keys, params).wait_ms >= 0
    monitor = make(specs=[QueueSpec(bulk, "tos"), QueueSpec(customs, "customs")])
    fill(producer, bulk, 50)
    fill(producer, customs, 50)
    entries = {e.state.queue: e for e in monitor.tick()}
    assert entries[bulk].state.reason == "downstream_concurrency"
    assert entries[customs].state.reason == "downstream_rate"
    assert entries[customs].gate is not None
    assert entries[customs].gate.wait_s > 1.0
    assert held.permit is not None
    held.permit.release()


def test_one_monitor_samples_the_others_stand_by(make: Callable[..., Monitor]) -> None:
    """The lease: a second monitor publishes nothing until the first stops."""
    first, second = make(), make()
    assert first.tick()
    with capture_logs() as logs:
        assert second.tick() == []
    assert not second.leader
    assert not events(logs, "queue_depth_sampled")
    first.stop()
    assert second.tick()
    assert second.leader


def test_the_quarantine_is_replayed_once_drained_never_past_mid_band(
    make: Callable[..., Monitor], ctx: Any
) -> None:
    """Drained (LOW): at most replay_rate × interval documents per round, refilling the
    queue only to the band's middle (6 here). Over HWM: nothing."""
    bulk = ctx.queues["bulk"]
    store = Quarantine(ctx.client, prefix=ctx.prefix)
    for n in range(30):
        store.add(
            QuarantinedDocument(f"k{n:02d}", "BULK_BL_PDF", bulk, "bulk.documents.store", {"n": n})
        )
    admission = Admission(
        CelerySender(ctx.producer),
        {bulk: "bulk.documents.store"},
        probe=RedisDepthProbe(ctx.client),
        quarantine=store,
        policy=SheddingPolicy(sheddable={"BULK_BL_PDF"}, classes=ctx.classes),
        board=LoadBoard(ctx.client, prefix=ctx.prefix),
        watermarks=WatermarkStore(ctx.client, prefix=ctx.prefix, defaults=MARKS),
    )
    ticks = Ticks()
    monitor = make(specs=[QueueSpec(bulk)], admission=admission, replay_rate=4.0, clock=ticks)
    with capture_logs() as logs:
        monitor.tick()  # credit 4 (one interval at 4/s), room 6 → 4
        ticks.now += 1.0
        monitor.tick()  # depth 4: room 2 → 2
        ticks.now += 1.0
        monitor.tick()  # depth 6: no room
    assert ctx.client.llen(bulk) == 6
    assert store.depth(bulk) == 24
    assert [e["documents"] for e in events(logs, "quarantine_replayed")] == [4, 2]

    ctx.fill(bulk, 20)  # a new surge: over HWM, nothing replayed
    ticks.now += 1.0
    monitor.tick()
    assert store.depth(bulk) == 24
    ctx.client.delete(bulk)
    ticks.now += 10.0
    monitor.tick()
    assert store.depth(bulk) == 20  # 10 s idle still earns only one interval's worth: 4
    assert admission.submit(
        Inbound("new", ctx.classes["BULK_BL_PDF"], {"n": -1})
    ).queued  # and the intake is open


def test_the_desired_workers_of_a_relayed_downstream_fill_its_pipelines(
    make: Callable[..., Monitor],
    producer: Celery,
    redis_client: redis.Redis,
    prefix: str,
    queues: dict[str, str],
) -> None:
    """With TIDEGATE_TOS_RELAY_DEPTH=2 the monitor sizes the TOS pool for two requests
    on each of its connections: 4 × (2 + 0.02 / 0.05) → 10, + 1; without it, 7."""
    from tidegate.ops.monitor import gate_view
    from tidegate.settings import Settings

    tos_queue = queues["customs"]
    gate = Gate(redis_client, "tos", prefix=prefix)
    gate.configure(rate=1000.0, burst=100, concurrency=4)
    policy = ScalingPolicy(backlog_per_worker=1, service_s=0.05, overhead_s=0.02, max_workers=64)
    fill(producer, tos_queue, 200)
    relayed = make(
        specs=[QueueSpec(tos_queue, "tos", policy)],
        settings=Settings.load({"TIDEGATE_TOS_RELAY_DEPTH": "2", "TIDEGATE_TOS_CONCURRENCY": "4"}),
    )

    (entry,) = relayed.tick()

    assert entry.state.quota_workers == entry.state.desired_workers == 11
    assert gate_view(gate).quota(0.05, 0.02).workers == 7
