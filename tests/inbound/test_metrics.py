"""``/metrics`` scraped over HTTP, and the worker-side counters behind it."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import httpx
import pytest
import redis
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from tidegate.downstream import DownstreamClient
from tidegate.errors import ConfigurationError, DownstreamThrottled
from tidegate.flow import Gate
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.load.depth import QueueDepth
from tidegate.load.dlq import DeadLetter, DeadLetterQueue
from tidegate.load.quarantine import Quarantine, QuarantinedDocument
from tidegate.load.watermarks import BoardEntry, LoadBoard, LoadState, Watermarks, WatermarkStore
from tidegate.logging import configure
from tidegate.ops.metrics import MetricsServer, install_event_counters, registry_for
from tidegate.ops.monitor import Monitor, QueueSpec
from tidegate.sim import CustomsSim

pytestmark = pytest.mark.redis

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """GET /metrics and index every sample by (name, sorted labels)."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_endpoint_serves_every_series_fleet_wide(
    producer: Celery, redis_client: redis.Redis, prefix: str, queues: dict[str, str]
) -> None:
    """Queue depth, signal, workers, gate state and waits, throttles, pauses, 429s,
    shed/replayed by class, quarantine depth and age, DLQ depth, in replay and age: all
    scraped."""
    bulk = queues["bulk"]
    configure(level="WARNING", stream=io.StringIO())
    counters = install_event_counters(redis_client, prefix=prefix, level="WARNING")

    gate = Gate(redis_client, "customs", prefix=prefix)
    gate.configure(rate=50, burst=1)
    gate.acquire(max_wait=5).release()
    gate.acquire(max_wait=5).release()  # waits for its slot: a reserve event with wait_s
    assert not gate.try_acquire().allowed  # refused now: a try event
    with CustomsSim(rate=100, burst=5) as sim:
        sim.set_fault("429_no_retry_after", count=1)
        client = DownstreamClient("customs", sim.url, feedback=gate)
        with pytest.raises(DownstreamThrottled):
            client.send("/declarations", {"type": "VERMAS"}, idempotency_key="k-429")
        client.close()
    assert counters.dropped == 0

    store = Quarantine(redis_client, prefix=prefix)
    for n in range(3):
        store.add(QuarantinedDocument(f"q{n}", "BULK_BL_PDF", bulk, "bulk.documents.store"))
    (claimed,) = store.claim(bulk, 1)
    store.ack(claimed)
    letters = DeadLetterQueue(redis_client, prefix=prefix)
    for key in ("d1", "d2"):
        letters.add(
            DeadLetter(key=key, task="edi.customs.submit", reason="downstream rejected (HTTP 422)")
        )
    assert letters.begin_replay("d2").taken
    for _ in range(20):
        producer.send_task("filler", args=[{}], queue=bulk)
    monitor = Monitor(
        redis_client,
        RedisDepthProbe(redis_client),
        [QueueSpec(bulk, "customs")],
        prefix=prefix,
        watermarks=WatermarkStore(redis_client, prefix=prefix, defaults=Watermarks(10, 2)),
    )
    monitor.tick()

    with MetricsServer(registry_for(redis_client, prefix=prefix)) as server:
        samples = scrape(server.url)

    assert value(samples, "tidegate_queue_depth", queue=bulk) == 20
    assert value(samples, "tidegate_queue_messages", queue=bulk, state="ready") == 20
    assert value(samples, "tidegate_queue_messages", queue=bulk, state="unacked") == 0
    assert value(samples, "tidegate_queue_high_watermark", queue=bulk) == 10
    assert value(samples, "tidegate_queue_over_hwm_intervals", queue=bulk) == 1
    assert value(samples, "tidegate_scaling_signal", queue=bulk) == 0  # hold: gate paused
    assert (
        value(
            samples,
            "tidegate_scaling_signal_info",
            queue=bulk,
            signal="hold",
            reason="downstream_paused",
        )
        == 1
    )
    assert value(samples, "tidegate_desired_workers", queue=bulk) >= 1
    assert value(samples, "tidegate_gate_paused", downstream="customs") == 1
    assert value(samples, "tidegate_gate_tokens_available", downstream="customs") >= 0
    assert (
        value(
            samples,
            "tidegate_gate_throttles_total",
            downstream="customs",
            reason="rate",
            mode="try",
        )
        == 1
    )
    reserved = value(
        samples,
        "tidegate_gate_throttles_total",
        downstream="customs",
        reason="rate",
        mode="reserve",
    )
    assert reserved >= 1
    assert value(samples, "tidegate_gate_wait_seconds_count", downstream="customs") == reserved
    assert value(samples, "tidegate_gate_wait_seconds_bucket", downstream="customs", le="+Inf") == (
        reserved
    )
    assert value(samples, "tidegate_gate_wait_seconds_sum", downstream="customs") > 0
    assert (
        value(samples, "tidegate_gate_pauses_total", downstream="customs", reason="http_429") >= 1
    )
    assert value(samples, "tidegate_downstream_429_total", downstream="customs") == 1
    assert value(samples, "tidegate_shed_total", document_class="BULK_BL_PDF") == 3
    assert value(samples, "tidegate_replayed_total", document_class="BULK_BL_PDF") == 1
    assert value(samples, "tidegate_quarantine_depth", queue=bulk) == 2
    assert value(samples, "tidegate_quarantine_oldest_age_seconds") >= 0
    assert value(samples, "tidegate_dlq_depth") == 2
    assert value(samples, "tidegate_dlq_in_replay") == 1
    assert value(samples, "tidegate_dlq_oldest_age_seconds") >= 0
    assert value(samples, "tidegate_dlq_dead_lettered_total") == 2


def test_counts_from_worker_processes_add_up_in_redis(redis_url: str, prefix: str) -> None:
    """Two worker processes, three tries each at a gate with one token per 1,000 s: the
    first is admitted once, every other try (2 + 3) is refused, and the scrape — served
    by a third process — shows 5: the counters live in Redis."""
    script = textwrap.dedent(
        f"""
        import io, sys
        from tidegate._redis import client_from_url
        from tidegate.flow import Gate
        from tidegate.logging import configure
        from tidegate.ops.metrics import install_event_counters

        configure(level="ERROR", stream=io.StringIO())
        install_event_counters({redis_url!r}, prefix={prefix!r}, level="ERROR")
        gate = Gate(client_from_url({redis_url!r}), "tos", prefix={prefix!r})
        gate.configure(rate=0.001, burst=1)
        gate.try_acquire()
        gate.try_acquire()
        gate.try_acquire()
        """
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    client = redis.Redis.from_url(redis_url)
    registry = registry_for(client, prefix=prefix)
    try:
        with MetricsServer(registry) as server:
            samples = scrape(server.url)
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
    assert (
        value(samples, "tidegate_gate_throttles_total", downstream="tos", reason="rate", mode="try")
        == 5
    )


def _stopped_monitor_board(
    producer: Celery, redis_client: redis.Redis, prefix: str, bulk: str
) -> tuple[Monitor, float]:
    """A monitor that sampled a backlog (desired_workers > 0) once and then stopped."""
    for _ in range(30):
        producer.send_task("filler", args=[{}], queue=bulk)
    monitor = Monitor(
        redis_client,
        RedisDepthProbe(redis_client),
        [QueueSpec(bulk)],
        prefix=prefix,
        interval_s=5.0,
        watermarks=WatermarkStore(redis_client, prefix=prefix, defaults=Watermarks(10, 2)),
    )
    (entry,) = monitor.tick()
    monitor.stop()
    assert entry.state.desired_workers >= 1
    return monitor, entry.sampled_at_ms


def test_a_stopped_monitors_last_sample_is_withheld_once_stale(
    producer: Celery, redis_client: redis.Redis, prefix: str, queues: dict[str, str]
) -> None:
    """Issue #11.6: /metrics must not serve a dead monitor's desired_workers forever.

    An injected clock ages the sample: within five sampling periods every series is
    served; past them only the age and the stale flag remain, and the change is logged
    once, not at every scrape.
    """
    bulk = queues["bulk"]
    _, sampled_ms = _stopped_monitor_board(producer, redis_client, prefix, bulk)
    now = {"ms": sampled_ms + 24_000}  # 4.8 periods of 5 s
    registry = registry_for(redis_client, prefix=prefix, clock=lambda: now["ms"])

    with MetricsServer(registry) as server:
        fresh = scrape(server.url)
        now["ms"] = sampled_ms + 26_000  # 5.2 periods
        with capture_logs() as logs:
            stale = scrape(server.url)
            stale_again = scrape(server.url)

    assert value(fresh, "tidegate_desired_workers", queue=bulk) >= 1
    assert value(fresh, "tidegate_monitor_sample_stale", queue=bulk) == 0
    assert value(fresh, "tidegate_monitor_sample_age_seconds", queue=bulk) == pytest.approx(24)
    for samples in (stale, stale_again):
        served = {name for name, labels in samples if ("queue", bulk) in labels}
        assert served == {"tidegate_monitor_sample_age_seconds", "tidegate_monitor_sample_stale"}
        assert value(samples, "tidegate_monitor_sample_stale", queue=bulk) == 1
        assert value(samples, "tidegate_monitor_sample_age_seconds", queue=bulk) == (
            pytest.approx(26)
        )
    assert [(e["event"], e["queue"]) for e in logs] == [("metrics_sample_stale", bulk)]
    assert logs[0]["stale_after_s"] == 25.0


def test_a_new_sample_brings_the_series_back(
    producer: Celery, redis_client: redis.Redis, prefix: str, queues: dict[str, str]
) -> None:
    """A standby that takes over publishes a new sample: exported again, logged once."""
    bulk = queues["bulk"]
    monitor, sampled_ms = _stopped_monitor_board(producer, redis_client, prefix, bulk)
    now = {"ms": sampled_ms + 60_000}
    registry = registry_for(redis_client, prefix=prefix, clock=lambda: now["ms"])
    with MetricsServer(registry) as server:
        stale = scrape(server.url)
        (entry,) = monitor.tick()
        now["ms"] = entry.sampled_at_ms + 1_000
        with capture_logs() as logs:
            back = scrape(server.url)
        monitor.stop()

    assert ("tidegate_desired_workers", (("queue", bulk),)) not in stale
    assert value(back, "tidegate_desired_workers", queue=bulk) >= 1
    assert value(back, "tidegate_monitor_sample_stale", queue=bulk) == 0
    assert [e["event"] for e in logs] == ["metrics_sample_fresh"]


def test_without_a_clock_the_fleet_clock_ages_the_sample(
    redis_client: redis.Redis, prefix: str, queues: dict[str, str]
) -> None:
    """The default clock is Redis TIME: a board entry stamped a minute ago is stale."""
    bulk = queues["bulk"]
    board = LoadBoard(redis_client, prefix=prefix)
    state = LoadState(bulk, depth=500, desired_workers=7)
    minute_ago = board.now_ms() - 60_000
    board.publish(
        [BoardEntry(state, QueueDepth(bulk, 500), Watermarks(100, 10), None, minute_ago, 5.0)]
    )

    with MetricsServer(registry_for(redis_client, prefix=prefix)) as server:
        samples = scrape(server.url)

    assert ("tidegate_desired_workers", (("queue", bulk),)) not in samples
    assert ("tidegate_queue_depth", (("queue", bulk),)) not in samples
    assert value(samples, "tidegate_monitor_sample_stale", queue=bulk) == 1


def test_a_stale_threshold_must_be_positive(redis_client: redis.Redis, prefix: str) -> None:
    """A zero or infinite threshold would withhold everything or nothing: refused."""
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ConfigurationError):
            registry_for(redis_client, prefix=prefix, stale_after_periods=bad)
