"""The overload scenario: a surge the fleet cannot absorb, shed durably and given back.

5,000 bulk documents (scanned B/L PDFs, sheddable) and 500 VERMAS declarations
(compliance-critical, never sheddable) arrive together. Everything is real and local:
an embedded Redis (or ``REDIS_URL``) as broker and tidegate store, a customs single
window enforcing its own bucket (10/s), a document store (a database that slows down
with concurrent writers) behind a gate with a rate and a concurrency cap, and Celery
worker processes — one fixed-size pool per lane, the pool that "cannot grow any more".

The producer submits through :class:`~tidegate.load.admission.Admission`; a
:class:`~tidegate.ops.monitor.Monitor` samples both queues. Once the bulk queue has
been above its HWM for ``shed_after`` samples, the remaining bulk documents go to the
quarantine; the VERMAS are queued whatever the customs queue's depth. When the bulk
queue has drained to its LWM the monitor replays the quarantine, through the same
intake, refilling the queue only to the middle of its band. The run ends when every
document is delivered (or after ``timeout_s``) and reports ``shed_by_class``,
``replayed``, ``delivered`` against ``submitted``, ``lost`` — and when the VERMAS
were delivered relative to the bulk documents, measured on the downstreams' own
accept timelines.

Why one module of ~490 lines: it is one scenario — its configuration, its run (the
admission, the monitor and the replay wired together for it), its report and its two
tables — and no part of it serves another scenario; split, each part would only be
read with the others.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from rich.table import Table

from tidegate._redis import client_from_url
from tidegate.flow import Gate
from tidegate.harness.burst import vessel_burst
from tidegate.harness.burst_run import pending_keys
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.reconcile import reconcile
from tidegate.harness.report_view import summary_table
from tidegate.integrations.celery.depth import RedisDepthProbe
from tidegate.integrations.celery.sender import CelerySender
from tidegate.keys import Keyspace
from tidegate.load.admission import Admission, Inbound
from tidegate.load.dlq import DeadLetterQueue
from tidegate.load.parking import ParkingLot
from tidegate.load.quarantine import Quarantine
from tidegate.load.shedding import BULK_BL_PDF, BULK_QUEUE, CUSTOMS_QUEUE, document_class
from tidegate.load.watermarks import LoadBoard, ScalingPolicy, Watermarks, WatermarkStore
from tidegate.ops.monitor import Monitor, QueueSpec
from tidegate.sim import CustomsSim, DatabaseSim

__all__ = [
    "OverloadConfig",
    "OverloadSample",
    "live_table",
    "overload_documents",
    "report_table",
    "run_overload_demo",
]

#: queue → task of the scenario's Celery app (:mod:`tidegate.harness.overload_app`).
TASKS = {CUSTOMS_QUEUE: "edi.customs.submit", BULK_QUEUE: "bulk.documents.store"}


@dataclass(frozen=True, slots=True)
class OverloadConfig:
    """The knobs of the scenario (the CLI's flags).

    Args:
        vermas / bulk: documents of each kind in the surge.
        customs_rate / customs_burst: the customs gateway's real bucket.
        docstore_rate / docstore_concurrency: the document store's gate.
        customs_workers / bulk_workers: the fixed pool sizes.
        hwm / lwm / shed_after: the queues' watermarks and shedding delay (samples).
        interval_s: the monitor's sampling period.
        replay_rate: quarantined documents replayed per second, at most.
        arrival_s: spread the arrivals over this long (0 = all at once).
        seed: the same seed gives the same documents in the same order.
        timeout_s: give up (and report what is pending) after this long.
        max_wait_s: a worker's longest wait in place for its gate before parking.
    """

    vermas: int = 500
    bulk: int = 5000
    customs_rate: float = 10.0
    customs_burst: int = 3
    docstore_rate: float = 30.0
    docstore_concurrency: int = 4
    customs_workers: int = 2
    bulk_workers: int = 4
    hwm: int = 300
    lwm: int = 100
    shed_after: int = 3
    interval_s: float = 0.5
    replay_rate: float = 100.0
    arrival_s: float = 0.0
    seed: int = 7
    timeout_s: float = 900.0
    max_wait_s: float = 10.0


@dataclass(frozen=True, slots=True)
class OverloadSample:
    """One look at the run (every ``interval_s``), for a live view and the plot."""

    t: float
    submitted: int
    depth: dict[str, int]
    signal: dict[str, str]
    shedding: dict[str, bool]
    quarantined: int
    delivered: dict[str, int]
    responses_429: int
    parked: int
    dead_lettered: int
    rss_mb: float


@dataclass
class _Intake:
    """What the producer thread did."""

    submitted: int = 0
    queued: Counter[str] = field(default_factory=Counter)
    quarantined: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    error: BaseException | None = None


def overload_documents(config: OverloadConfig) -> list[Inbound]:
    """The surge: ``vermas`` VERMAS (real EDIFACT) and ``bulk`` B/L PDFs, shuffled."""
    vermas_class = document_class("VERMAS")
    docs = [
        Inbound(doc.key, vermas_class, doc.envelope())
        for doc in vessel_burst(config.vermas, seed=config.seed, mix={"VERMAS": 1.0})
    ]
    for index in range(config.bulk):
        key = hashlib.sha256(f"bl-pdf\x1f{config.seed}\x1f{index}".encode()).hexdigest()
        envelope = {
            "key": key,
            "type": "BL_PDF",
            "class": BULK_BL_PDF.name,
            "body": f"archive://bl/{config.seed}/{index:06d}.pdf",
        }
        docs.append(Inbound(key, BULK_BL_PDF, envelope))
    random.Random(config.seed).shuffle(docs)
    return docs


@contextlib.contextmanager
def _sims(config: OverloadConfig) -> Iterator[tuple[CustomsSim, DatabaseSim]]:
    customs = CustomsSim(
        rate=config.customs_rate, burst=config.customs_burst, suspend_after=5, suspend_s=30
    )
    docstore = DatabaseSim(base_latency_s=0.01, per_writer_s=0.01)
    with customs, docstore:
        yield customs, docstore


def _produce(admission: Admission, docs: list[Inbound], arrival_s: float, out: _Intake) -> None:
    started = time.monotonic()
    try:
        for index, doc in enumerate(docs):
            if arrival_s > 0:
                due = started + arrival_s * index / len(docs)
                time.sleep(max(0.0, due - time.monotonic()))
            result = admission.submit(doc)
            (out.queued if result.queued else out.quarantined)[doc.document_class.name] += 1
            out.submitted += 1
    except BaseException as exc:  # reported by the caller, never swallowed
        out.error = exc
    out.seconds = time.monotonic() - started


def _downstream(stats: dict[str, Any], limit_per_s: float, t0: float) -> dict[str, Any]:
    first, last = stats.get("first_accept_ts"), stats.get("last_accept_ts")
    drain = (last - first) if first is not None and last is not None else 0.0
    return {
        "accepted": stats["distinct_keys"],
        "duplicates": stats["duplicates"],
        "responses_429": stats["responses_429"],
        "responses_503": stats["responses_503"],
        "limit_per_s": limit_per_s,
        "max_accepted_1s": stats.get("max_accepted_1s"),
        "first_delivered_s": round(first - t0, 3) if first is not None else None,
        "last_delivered_s": round(last - t0, 3) if last is not None else None,
        "drain_s": round(drain, 3),
    }


def _ordering(customs: dict[str, Any], docstore: dict[str, Any], t0: float) -> dict[str, Any]:
    """When the VERMAS were delivered relative to the bulk documents."""
    vermas_times = customs.get("accept_timeline", [])
    bulk_times = docstore.get("accept_timeline", [])
    if not vermas_times or not bulk_times:
        return {"vermas_last_delivered_s": None, "bulk_last_delivered_s": None}
    vermas_last, bulk_last = max(vermas_times), max(bulk_times)
    before = sum(1 for t in bulk_times if t <= vermas_last)
    return {
        "vermas_last_delivered_s": round(vermas_last - t0, 3),
        "bulk_last_delivered_s": round(bulk_last - t0, 3),
        "vermas_all_before_last_bulk": vermas_last < bulk_last,
        "bulk_delivered_before_last_vermas": before,
        "bulk_share_after_last_vermas": round(1 - before / len(bulk_times), 3),
    }


@dataclass
class _Watch:
    """What the sampling loop accumulates besides the samples."""

    signals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    peaks: Counter[str] = field(default_factory=Counter)
    peak_rss: float = 0.0


@dataclass
class _Handles:
    """Everything one run reads while it samples."""

    client: Any
    customs: CustomsSim
    docstore: DatabaseSim
    fleet: Fleet
    board: LoadBoard
    quarantine: Quarantine
    parking: ParkingLot
    dlq: DeadLetterQueue

    def sample(self, t: float, intake: _Intake, watch: _Watch) -> OverloadSample:
        c_stats = self.customs.stats(timeline=False)
        d_stats = self.docstore.stats(timeline=False)
        entries = self.board.read()
        rss = sum(self.fleet.rss_mb().values())
        watch.peak_rss = max(watch.peak_rss, rss)
        for queue, entry in entries.items():
            watch.peaks[queue] = max(watch.peaks[queue], entry.state.depth)
            history = watch.signals.setdefault(queue, [])
            change = {"signal": entry.state.signal.value, "reason": entry.state.reason}
            if not history or {k: history[-1][k] for k in change} != change:
                history.append({"t": t, **change})
        waiting = len(self.quarantine)
        watch.peaks["quarantine"] = max(watch.peaks["quarantine"], waiting)
        return OverloadSample(
            t=t,
            submitted=intake.submitted,
            depth={q: e.state.depth for q, e in entries.items()},
            signal={q: e.state.signal.value for q, e in entries.items()},
            shedding={q: e.state.shedding for q, e in entries.items()},
            quarantined=waiting,
            delivered={
                "VERMAS": c_stats["distinct_keys"],
                BULK_BL_PDF.name: d_stats["distinct_keys"],
            },
            responses_429=c_stats["responses_429"] + d_stats["responses_429"],
            parked=self.parking.depth(),
            dead_lettered=len(self.dlq),
            rss_mb=round(rss, 1),
        )

    def broker_depth(self) -> int:
        return sum(d.total for d in RedisDepthProbe(self.client).sample(list(TASKS)).values())


def _configure_gates(client: Any, prefix: str, config: OverloadConfig) -> None:
    """Write the live gate policies: they win over every process's environment, so the
    workers and the monitor see the same shapes (the customs burst keeps two tokens of
    slack for transit jitter, as in the vessel scenario)."""
    Gate(client, "customs", prefix=prefix).configure(
        rate=config.customs_rate, burst=max(1, config.customs_burst - 2)
    )
    Gate(client, "docstore", prefix=prefix).configure(
        rate=config.docstore_rate,
        burst=max(1, round(config.docstore_rate / 10)),
        concurrency=config.docstore_concurrency,
    )


def _admission(url: str, prefix: str, app: Celery, config: OverloadConfig) -> Admission:
    """An intake with its own connections (one per thread that submits)."""
    marks = Watermarks(hwm=config.hwm, lwm=config.lwm, shed_after=config.shed_after)
    return Admission(
        CelerySender(app),
        TASKS,
        probe=RedisDepthProbe(client_from_url(url)),
        quarantine=Quarantine(client_from_url(url), prefix=prefix),
        watermarks=WatermarkStore(client_from_url(url), prefix=prefix, defaults=marks),
        board=LoadBoard(client_from_url(url), prefix=prefix),
        interval_s=config.interval_s,
    )


def _monitor(url: str, prefix: str, replayer: Celery, config: OverloadConfig) -> Monitor:
    marks = Watermarks(hwm=config.hwm, lwm=config.lwm, shed_after=config.shed_after)
    policy = ScalingPolicy(backlog_per_worker=50, service_s=0.2, max_workers=32)
    client = client_from_url(url)
    return Monitor(
        client,
        RedisDepthProbe(client_from_url(url)),
        [QueueSpec(CUSTOMS_QUEUE, "customs", policy), QueueSpec(BULK_QUEUE, "docstore", policy)],
        prefix=prefix,
        interval_s=config.interval_s,
        admission=_admission(url, prefix, replayer, config),
        replay_rate=config.replay_rate,
        watermarks=WatermarkStore(client, prefix=prefix, defaults=marks),
    )


def run_overload_demo(
    url: str,
    config: OverloadConfig,
    *,
    on_sample: Callable[[OverloadSample, int], None] | None = None,
    log_dir: Path | None = None,
) -> tuple[dict[str, Any], list[OverloadSample]]:
    """Run the scenario against Redis at ``url``; return (report, samples).

    Args:
        url: Redis for broker and tidegate state.
        config: the scenario's knobs.
        on_sample: called with each sample and the number of documents (live view).
        log_dir: worker logs go here (JSON decision events).
    """
    prefix = f"tidegate-overload-{uuid.uuid4().hex[:8]}"
    client = client_from_url(url)
    docs = overload_documents(config)
    samples: list[OverloadSample] = []
    intake, watch = _Intake(), _Watch()
    with _sims(config) as (customs, docstore):
        env = {
            "TIDEGATE_REDIS_URL": url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_DOCSTORE_URL": docstore.url,
            "TIDEGATE_MAX_WAIT_S": repr(config.max_wait_s),
            "TIDEGATE_LOG_LEVEL": "INFO" if log_dir is not None else "WARNING",
        }
        _configure_gates(client, prefix, config)
        pools = [
            Pool("customs", [CUSTOMS_QUEUE], concurrency=config.customs_workers),
            Pool("bulk", [BULK_QUEUE], concurrency=config.bulk_workers),
        ]
        fleet = Fleet("tidegate.harness.overload_app", pools, env=env, log_dir=log_dir)
        handles = _Handles(
            client,
            customs,
            docstore,
            fleet,
            LoadBoard(client, prefix=prefix),
            Quarantine(client, prefix=prefix),
            ParkingLot(client, prefix=prefix),
            DeadLetterQueue(client, prefix=prefix),
        )
        producer, replayer = Celery(broker=url), Celery(broker=url)
        monitor = _monitor(url, prefix, replayer, config)
        producer_thread = threading.Thread(
            target=_produce,
            args=(_admission(url, prefix, producer, config), docs, config.arrival_s, intake),
            name="tidegate-overload-producer",
            daemon=True,
        )
        try:
            fleet.start()
            monitor.tick()  # the board is fresh before the first document arrives
            monitor.start()
            start, t0 = time.monotonic(), time.time()
            producer_thread.start()
            while True:
                time.sleep(config.interval_s)
                sample = handles.sample(round(time.monotonic() - start, 3), intake, watch)
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample, len(docs))
                if intake.error is not None:
                    raise intake.error
                settled = sum(sample.delivered.values()) + sample.dead_lettered
                done = (
                    intake.submitted == len(docs)
                    and settled >= len(docs)
                    and sample.quarantined == 0
                    and sample.parked == 0
                    and handles.broker_depth() == 0
                )
                if done or time.monotonic() - start > config.timeout_s:
                    break
            report = _report(
                handles, docs, intake=intake, watch=watch, samples=samples, config=config, t0=t0
            )
        finally:
            monitor.stop()
            producer_thread.join(timeout=30)
            fleet.stop()
            producer.close()
            replayer.close()
    _cleanup(client, prefix)
    return report, samples


def _report(
    handles: _Handles,
    docs: list[Inbound],
    *,
    intake: _Intake,
    watch: _Watch,
    samples: list[OverloadSample],
    config: OverloadConfig,
    t0: float,
) -> dict[str, Any]:
    c_full, d_full = handles.customs.stats(), handles.docstore.stats()
    q_stats = handles.quarantine.stats()
    outcome = reconcile(
        (doc.key for doc in docs),
        accepted=Counter(handles.customs.accepted_keys())
        + Counter(handles.docstore.accepted_keys()),
        dead_lettered=(letter.key for letter in handles.dlq.iter()),
        quarantined=(document.key for document in handles.quarantine.iter()),
        pending=pending_keys(handles.client, list(TASKS), handles.parking),
    )
    counts = outcome.counts()
    replayed_by_class = dict(q_stats["replayed_total"])
    by_class = Counter(doc.document_class.name for doc in docs)
    return {
        "scenario": "overload",
        "submitted": len(docs),
        "submitted_by_class": dict(sorted(by_class.items())),
        "submit_s": round(intake.seconds, 3),
        "queued_at_intake": dict(sorted(intake.queued.items())),
        "shed_by_class": dict(q_stats["shed_total"]),
        "replayed": sum(replayed_by_class.values()),
        "replayed_by_class": replayed_by_class,
        "delivered": counts["delivered"],
        "delivered_by_class": {
            "VERMAS": c_full["distinct_keys"],
            BULK_BL_PDF.name: d_full["distinct_keys"],
        },
        "dead_lettered": counts["dead_lettered"],
        "quarantined": counts["quarantined"],
        "pending": counts["pending"],
        "lost": counts["lost"],
        "lost_keys": outcome.keys("lost")[:20],
        "duplicates": c_full["duplicates"] + d_full["duplicates"],
        "vermas_quarantined": q_stats["shed_total"].get("VERMAS", 0),
        "ordering": _ordering(c_full, d_full, t0),
        "signals": watch.signals,
        "peak_depth": dict(watch.peaks),
        "peak_worker_rss_mb": round(watch.peak_rss, 1),
        "elapsed_s": samples[-1].t if samples else 0.0,
        "downstreams": {
            "customs": _downstream(c_full, config.customs_rate, t0),
            "docstore": _downstream(d_full, config.docstore_rate, t0),
        },
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
    }


def _cleanup(client: Any, prefix: str) -> None:
    keys = list(client.scan_iter(match=Keyspace(prefix).everything(), count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def live_table(sample: OverloadSample, total: int) -> Table:
    """A rich table of one sample, for ``tidegate demo --scenario overload``'s live view."""
    table = Table(title=f"overload — t = {sample.t:5.1f} s", expand=False)
    for column in ("queue", "depth", "signal", "shedding"):
        table.add_column(column, justify="left" if column in {"queue", "signal"} else "right")
    for queue in TASKS:
        table.add_row(
            queue,
            str(sample.depth.get(queue, 0)),
            sample.signal.get(queue, "-"),
            "yes" if sample.shedding.get(queue) else "no",
        )
    delivered = sum(sample.delivered.values())
    table.caption = (
        f"submitted {sample.submitted}/{total} · delivered {delivered} "
        f"(VERMAS {sample.delivered.get('VERMAS', 0)}) · quarantined {sample.quarantined} "
        f"· parked {sample.parked} · dead-lettered {sample.dead_lettered} "
        f"· 429s {sample.responses_429} · workers {sample.rss_mb:.0f} MiB"
    )
    return table


def report_table(report: dict[str, Any]) -> Table:
    """The outcome under the JSON report's own names (:mod:`tidegate.harness.report_view`)."""
    return summary_table(report, title="overload: outcome")
