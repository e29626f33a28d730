"""Prometheus metrics: queue depth, scaling, gates, shedding, quarantine and DLQ, fleet-wide.

Everything exported is read from Redis at scrape time, so any process — the monitor
(``tidegate monitor --metrics-port``) or a standalone ``tidegate metrics`` — serves the
same fleet-wide numbers, and a scrape never depends on which process counted what.
Where each number is measured:

=====================================  ==============================================
metric                                 measured by
=====================================  ==============================================
``tidegate_queue_depth``,              the monitor's broker probe, each sample (ready
``tidegate_queue_messages``            incl. priority sub-queues, + reserved unacked)
``tidegate_scaling_signal``,           the monitor's :class:`~tidegate.load.LoadState`
``tidegate_desired_workers`` …         of the same sample, from the board
``tidegate_gate_paused``,              the monitor's read of each gate at the sample
``tidegate_gate_wait_ahead_seconds``   (how long a new admission would wait *now*)
``tidegate_gate_wait_seconds``         worker processes, from their own decision events
(histogram)                            (``GateThrottled`` mode ``reserve`` and pause
                                       waits): **only admissions that had to wait**
                                       — an immediate admission emits nothing
``tidegate_gate_throttles_total``,     worker processes, from their decision events,
``tidegate_gate_pauses_total``,        counted in Redis (HINCRBY) by the
``tidegate_downstream_429_total``      :class:`EventCounters` event subscriber
``tidegate_shed_total``,               the quarantine itself, atomically with each
``tidegate_replayed_total``            shed / replayed document (by document class)
``tidegate_quarantine_*``,             the quarantine and the DLQ, read at scrape
``tidegate_dlq_*``
``tidegate_adaptive_*``                the adaptive controllers' state in Redis
                                       (:mod:`tidegate.ops.adaptive_metrics`)
``tidegate_redis_writable``,           a one-key write probe at each scrape: 0 while
``tidegate_redis_unwritable_info``     Redis refuses writes (memory full under
                                       ``noeviction``, read-only replica), with the
                                       cause; the workers are waiting then
=====================================  ==============================================

Worker-side counters need :func:`install_event_counters` in each worker; they count
the typed decision events (:mod:`tidegate.events`), whatever the log level, into
``<prefix>:{metrics}:events``.

A sample older than ``stale_after_periods`` of its monitor's sampling periods is not
exported: an autoscaler must not keep scaling on the last number of a monitor that
stopped. For such a queue only ``tidegate_monitor_sample_age_seconds`` and
``tidegate_monitor_sample_stale`` (1) remain, so alerts can say why the rest is gone.

Why one module of ~480 lines: a third of it is this reference (what each metric
measures); the rest is one collector, one method per metric family, all from the same
scrape and the same staleness rule. The worker side — the event counters — is
:mod:`tidegate.ops.event_counters`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import redis
from prometheus_client import start_http_server
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tidegate._redis import map_redis_errors
from tidegate.errors import BackendUnwritable, ConfigurationError
from tidegate.keys import DEFAULT_PREFIX, Keyspace
from tidegate.load.dlq import DeadLetterQueue
from tidegate.load.quarantine import Quarantine
from tidegate.load.watermarks import BoardEntry, LoadBoard
from tidegate.logging import get_logger
from tidegate.ops.event_counters import (
    _SEP,
    GATE_WAIT_BUCKETS,
    EventCounters,
    _events_key,
    install_event_counters,
)

__all__ = [
    "DEFAULT_STALE_AFTER_PERIODS",
    "GATE_WAIT_BUCKETS",
    "EventCounters",
    "MetricsServer",
    "TidegateCollector",
    "install_event_counters",
    "registry_for",
]


#: A queue's sample is stale, and withheld, once older than this many of its monitor's
#: sampling periods. A standby monitor takes over within four (lease of three periods,
#: then its next tick), so a normal failover never blanks the scaling signal.
DEFAULT_STALE_AFTER_PERIODS = 5.0


log = get_logger("tidegate.metrics")


#: Lifetime of the write probe's key, ms: it never outlives the scraping.
_PROBE_TTL_MS = 60_000


class TidegateCollector(Collector):
    """Collects every tidegate metric from Redis at scrape time (see the module docstring).

    Args:
        client: tidegate's Redis.
        prefix: tidegate's key prefix.
        stale_after_periods: a queue's sample older than this many of its sampling
            periods is withheld (> 0).
        clock: ms since the epoch for sample ages; ``None`` = Redis ``TIME``, the clock
            the monitor stamps its samples with (tests pass a fake one).

    Raises:
        ConfigurationError: ``stale_after_periods`` is not a finite number > 0.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        stale_after_periods: float = DEFAULT_STALE_AFTER_PERIODS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not (math.isfinite(stale_after_periods) and stale_after_periods > 0):
            raise ConfigurationError(
                f"stale_after_periods must be a finite number > 0, got {stale_after_periods!r}"
            )
        self.client = client
        self.prefix = prefix
        self.stale_after_periods = stale_after_periods
        self.board = LoadBoard(client, prefix=prefix)
        self.quarantine = Quarantine(client, prefix=prefix)
        self.dlq = DeadLetterQueue(client, prefix=prefix)
        self._events = _events_key(prefix)
        self._clock = clock
        self._stale: set[str] = set()
        self._stale_lock = threading.Lock()
        self._probe = Keyspace(prefix).metrics_write_probe()
        self._unwritable: str | None = None

    def _age_s(self, entry: BoardEntry, now_ms: float | None) -> float:
        if now_ms is None:
            return entry.age_s
        return max(0.0, (now_ms - entry.sampled_at_ms) / 1000.0)

    def _freshness(
        self, entries: Mapping[str, BoardEntry]
    ) -> tuple[GaugeMetricFamily, GaugeMetricFamily, list[tuple[str, BoardEntry]]]:
        """Every queue's sample age and stale flag, and the entries fresh enough to export."""
        age = GaugeMetricFamily(
            "tidegate_monitor_sample_age_seconds",
            "Age of the monitor's last sample of the queue (exported even when stale).",
            labels=["queue"],
        )
        stale_flag = GaugeMetricFamily(
            "tidegate_monitor_sample_stale",
            "1 when the last sample is too old: every other series of the queue is withheld.",
            labels=["queue"],
        )
        now_ms = None if self._clock is None else float(self._clock())
        fresh = []
        for queue, entry in sorted(entries.items()):
            age_s = self._age_s(entry, now_ms)
            limit_s = self.stale_after_periods * entry.interval_s
            stale = age_s > limit_s
            self._note_staleness(queue, stale=stale, age_s=age_s, limit_s=limit_s)
            age.add_metric([queue], age_s)
            stale_flag.add_metric([queue], int(stale))
            if not stale:
                fresh.append((queue, entry))
        return age, stale_flag, fresh

    def _note_staleness(self, queue: str, *, stale: bool, age_s: float, limit_s: float) -> None:
        """Log when a queue's export starts or stops being withheld (not every scrape)."""
        with self._stale_lock:
            if stale == (queue in self._stale):
                return
            if stale:
                self._stale.add(queue)
            else:
                self._stale.discard(queue)
        log.warning(
            "metrics_sample_stale" if stale else "metrics_sample_fresh",
            queue=queue,
            age_s=round(age_s, 3),
            stale_after_s=limit_s,
        )

    def collect(self) -> Iterator[Metric]:
        yield from self._writability()
        yield from self._queues()
        yield from self._events_metrics()
        yield from self._quarantine_metrics()
        yield from self._dlq_metrics()

    def _queues(self) -> Iterator[Metric]:
        entries = self.board.read()
        depth = GaugeMetricFamily(
            "tidegate_queue_depth",
            "Messages in the queue not finished: ready (all priority sub-queues) + unacked.",
            labels=["queue"],
        )
        messages = GaugeMetricFamily(
            "tidegate_queue_messages",
            "Messages by state (ready, unacked).",
            labels=["queue", "state"],
        )
        consumers = GaugeMetricFamily(
            "tidegate_queue_consumers", "Consumers (RabbitMQ only).", labels=["queue"]
        )
        hwm = GaugeMetricFamily("tidegate_queue_high_watermark", "HWM.", labels=["queue"])
        lwm = GaugeMetricFamily("tidegate_queue_low_watermark", "LWM.", labels=["queue"])
        over = GaugeMetricFamily(
            "tidegate_queue_over_hwm_intervals",
            "Consecutive samples above the HWM.",
            labels=["queue"],
        )
        shedding = GaugeMetricFamily(
            "tidegate_queue_shedding",
            "1 while sheddable documents are quarantined.",
            labels=["queue"],
        )
        signal = GaugeMetricFamily(
            "tidegate_scaling_signal", "+1 scale_out, 0 hold, -1 scale_in.", labels=["queue"]
        )
        signal_info = GaugeMetricFamily(
            "tidegate_scaling_signal_info",
            "The current signal and its reason (value 1).",
            labels=["queue", "signal", "reason"],
        )
        desired = GaugeMetricFamily(
            "tidegate_desired_workers",
            "min(backlog-based, quota-based) workers, clamped.",
            labels=["queue"],
        )
        backlog = GaugeMetricFamily(
            "tidegate_backlog_workers", "Workers the backlog alone asks for.", labels=["queue"]
        )
        quota = GaugeMetricFamily(
            "tidegate_quota_workers", "Workers the downstream's rate can use.", labels=["queue"]
        )
        paused = GaugeMetricFamily(
            "tidegate_gate_paused", "1 while the gate is paused fleet-wide.", labels=["downstream"]
        )
        tokens = GaugeMetricFamily(
            "tidegate_gate_tokens_available", "Rate tokens available now.", labels=["downstream"]
        )
        leases = GaugeMetricFamily(
            "tidegate_gate_leases_held", "Concurrency leases held.", labels=["downstream"]
        )
        ahead = GaugeMetricFamily(
            "tidegate_gate_wait_ahead_seconds",
            "How long a new admission would wait for its token, at the last sample.",
            labels=["downstream"],
        )
        gates_seen: set[str] = set()
        age, stale_flag, fresh = self._freshness(entries)
        for queue, entry in fresh:
            state = entry.state
            depth.add_metric([queue], state.depth)
            messages.add_metric([queue, "ready"], entry.depth.ready)
            messages.add_metric([queue, "unacked"], entry.depth.unacked)
            if entry.depth.consumers is not None:
                consumers.add_metric([queue], entry.depth.consumers)
            hwm.add_metric([queue], entry.marks.hwm)
            lwm.add_metric([queue], entry.marks.lwm)
            over.add_metric([queue], state.over_hwm_intervals)
            shedding.add_metric([queue], int(state.shedding))
            signal.add_metric([queue], state.signal.direction)
            signal_info.add_metric([queue, state.signal.value, state.reason], 1)
            desired.add_metric([queue], state.desired_workers)
            backlog.add_metric([queue], state.backlog_workers)
            if state.quota_workers is not None:
                quota.add_metric([queue], state.quota_workers)
            gate = entry.gate
            if gate is not None and gate.name not in gates_seen:
                gates_seen.add(gate.name)
                paused.add_metric([gate.name], int(gate.paused_for_s > 0))
                tokens.add_metric([gate.name], gate.tokens_available)
                leases.add_metric([gate.name], gate.leases_held)
                ahead.add_metric([gate.name], gate.wait_s)
        yield from (depth, messages, consumers, hwm, lwm, over, shedding, signal, signal_info)
        yield from (desired, backlog, quota, age, stale_flag, paused, tokens, leases, ahead)

    def _writability(self) -> Iterator[Metric]:
        """Whether Redis takes writes now: everything else here only reads, and reads
        keep working on a Redis that is full or read-only."""
        cause: str | None = None
        try:
            with map_redis_errors("metrics write probe"):
                self.client.set(self._probe, b"1", px=_PROBE_TTL_MS)
        except BackendUnwritable as exc:
            cause = exc.cause
        self._note_writability(cause)
        yield GaugeMetricFamily(
            "tidegate_redis_writable",
            "0 while Redis refuses writes (memory full, read-only replica): workers wait.",
            value=int(cause is None),
        )
        info = GaugeMetricFamily(
            "tidegate_redis_unwritable_info",
            "Why Redis refuses writes (value 1), while it does.",
            labels=["cause"],
        )
        if cause is not None:
            info.add_metric([cause], 1)
        yield info

    def _note_writability(self, cause: str | None) -> None:
        """Log when writes start or stop being refused (not every scrape)."""
        with self._stale_lock:
            previous, self._unwritable = self._unwritable, cause
        if cause == previous:
            return
        if cause is not None:
            log.error("redis_unavailable_for_writes", cause=cause, operation="metrics scrape")
        else:
            log.warning("redis_writable_again", cause=previous)

    def _events_metrics(self) -> Iterator[Metric]:
        with map_redis_errors("metrics events"):
            raw = cast("dict[bytes, bytes]", self.client.hgetall(self._events))
        throttles = CounterMetricFamily(
            "tidegate_gate_throttles",
            "Gate admissions that waited or were refused (workers' decision events).",
            labels=["downstream", "reason", "mode"],
        )
        pauses = CounterMetricFamily(
            "tidegate_gate_pauses",
            "Fleet-wide pauses set or extended.",
            labels=["downstream", "reason"],
        )
        http_429 = CounterMetricFamily(
            "tidegate_downstream_429", "429 answers seen by workers.", labels=["downstream"]
        )
        buckets: dict[str, dict[str, float]] = {}
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for raw_field, raw_value in sorted(raw.items()):
            parts = raw_field.decode().split(_SEP)
            value = float(raw_value)
            kind, labels = parts[0], parts[1:]
            if kind == "throttles" and len(labels) == 3:
                throttles.add_metric(labels, value)
            elif kind == "pauses" and len(labels) == 2:
                pauses.add_metric(labels, value)
            elif kind == "http_429" and len(labels) == 1:
                http_429.add_metric(labels, value)
            elif kind == "gate_wait" and len(labels) == 2:
                buckets.setdefault(labels[0], {})[labels[1]] = value
            elif kind == "gate_wait_sum" and len(labels) == 1:
                sums[labels[0]] = value
            elif kind == "gate_wait_count" and len(labels) == 1:
                counts[labels[0]] = value
        waits = HistogramMetricFamily(
            "tidegate_gate_wait_seconds",
            "Gate waits of admissions that had to wait (rate reservation or pause), "
            "from workers' decision events; immediate admissions are not counted.",
            labels=["downstream"],
        )
        for downstream in sorted(set(buckets) | set(counts)):
            per = buckets.get(downstream, {})
            cumulative, rows = 0.0, []
            for bound in GATE_WAIT_BUCKETS:
                cumulative += per.get(repr(bound), 0.0)
                rows.append((repr(bound), cumulative))
            rows.append(("+Inf", cumulative + per.get("+Inf", 0.0)))
            waits.add_metric([downstream], rows, sum_value=sums.get(downstream, 0.0))
        yield from (throttles, pauses, http_429, waits)

    def _quarantine_metrics(self) -> Iterator[Metric]:
        stats = self.quarantine.stats()
        shed = CounterMetricFamily(
            "tidegate_shed", "Documents quarantined by shedding.", labels=["document_class"]
        )
        replayed = CounterMetricFamily(
            "tidegate_replayed", "Quarantined documents queued again.", labels=["document_class"]
        )
        for name, value in stats["shed_total"].items():
            shed.add_metric([name], value)
        for name, value in stats["replayed_total"].items():
            replayed.add_metric([name], value)
        depth = GaugeMetricFamily(
            "tidegate_quarantine_depth", "Documents waiting in the quarantine.", labels=["queue"]
        )
        for queue, count in stats["by_queue"].items():
            depth.add_metric([queue], count)
        oldest = GaugeMetricFamily(
            "tidegate_quarantine_oldest_age_seconds",
            "Age of the oldest quarantined document (0 when empty).",
            value=stats["oldest_age_s"],
        )
        yield from (shed, replayed, depth, oldest)

    def _dlq_metrics(self) -> Iterator[Metric]:
        stats = self.dlq.stats()
        yield GaugeMetricFamily(
            "tidegate_dlq_depth", "Records in the dead-letter queue.", value=stats["records"]
        )
        yield GaugeMetricFamily(
            "tidegate_dlq_in_replay",
            "Dead letters a replay has published and whose unit has not settled yet.",
            value=stats["in_replay"],
        )
        yield GaugeMetricFamily(
            "tidegate_dlq_oldest_age_seconds",
            "Age of the oldest dead letter (0 when empty).",
            value=stats["oldest_age_s"],
        )
        yield CounterMetricFamily(
            "tidegate_dlq_dead_lettered",
            "Units ever dead-lettered.",
            value=stats["dead_lettered_total"],
        )


def registry_for(
    client: redis.Redis,
    *,
    prefix: str = DEFAULT_PREFIX,
    stale_after_periods: float = DEFAULT_STALE_AFTER_PERIODS,
    clock: Callable[[], float] | None = None,
) -> CollectorRegistry:
    """A registry holding only tidegate's collectors (no process metrics of the scraper):
    this module's and the adaptive controllers' (:mod:`tidegate.ops.adaptive_metrics`)."""
    from tidegate.ops.adaptive_metrics import AdaptiveCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        TidegateCollector(
            client, prefix=prefix, stale_after_periods=stale_after_periods, clock=clock
        )
    )
    registry.register(AdaptiveCollector(client, prefix=prefix))
    return registry


class MetricsServer:
    """Serves ``/metrics`` over HTTP from a daemon thread.

    Args:
        registry: what to expose (:func:`registry_for`).
        port: 0 picks a free port (read :attr:`port` after :meth:`start`).
        addr: the address to bind.
    """

    def __init__(self, registry: CollectorRegistry, *, port: int = 0, addr: str = "127.0.0.1"):
        self.registry = registry
        self.addr = addr
        self._port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        self._server, self._thread = start_http_server(self._port, self.addr, self.registry)
        self._port = int(self._server.server_address[1])
        return self

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self._port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
