"""The vessel-burst scenario: a berthing burst through a real Celery fleet and the gate.

Everything is real and local: an embedded Redis (or ``REDIS_URL``) as broker and gate
store, a customs single window that enforces its own per-second bucket and answers 429
(and suspends repeat offenders), a TOS with a connection limit, and Celery worker
processes — one pool per downstream, prefetch 1, acks_late. The burst is submitted at
once; the scenario samples queue depths, downstream counters and worker memory until
every document is delivered, dead-lettered or quarantined, then reports.

The gate is configured with the downstream's *real* shape: the customs rate, and a
burst two below the gateway's bucket. The slack is for transit jitter: a call admitted
at t may reach the gateway late (a cold connection, a busy core) and land right next
to the calls admitted after it; two spare tokens absorb 2/rate seconds of that. It
costs nothing in sustained throughput.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery

from tidegate._redis import client_from_url
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.ops.burst import vessel_burst
from tidegate.ops.fleet import Fleet, Pool
from tidegate.sim import CustomsSim, TosSim

__all__ = ["Sample", "VesselConfig", "cleanup_prefix", "queue_depths", "run_vessel_demo"]

TASK_FOR_QUEUE = {"edi.customs": "edi.customs.submit", "edi.tos": "edi.tos.push"}


@dataclass(frozen=True, slots=True)
class VesselConfig:
    """The knobs of the scenario (the CLI's flags)."""

    interchanges: int = 2000
    customs_rate: float = 10.0
    customs_burst: int = 3
    tos_connections: int = 4
    tos_service_s: float = 0.05
    workers: int = 2
    seed: int = 7
    timeout_s: float = 900.0
    max_wait_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the system (every ``interval_s``)."""

    t: float
    depth: dict[str, int]
    accepted: dict[str, int]
    responses_429: int
    responses_503: int
    parked: int
    dead_lettered: int
    rss_mb: float


@dataclass
class _Run:
    config: VesselConfig
    url: str
    log_dir: Path | None
    samples: list[Sample] = field(default_factory=list)


def queue_depths(client: Any, queues: list[str]) -> dict[str, int]:
    """LLEN of each queue, plus the broker's unacknowledged messages (one round trip)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
    pipe.hlen("unacked")
    values = pipe.execute()
    depth = dict(zip(queues, values[:-1], strict=True))
    depth["unacked"] = values[-1]
    return depth


def _downstream_report(stats: dict[str, Any], limit_per_s: float) -> dict[str, Any]:
    first, last = stats.get("first_accept_ts"), stats.get("last_accept_ts")
    drain = (last - first) if first is not None and last is not None else 0.0
    calls = stats["distinct_keys"]
    ideal = calls / limit_per_s if limit_per_s else 0.0
    return {
        "accepted": calls,
        "duplicates": stats["duplicates"],
        "responses_429": stats["responses_429"],
        "responses_503": stats["responses_503"],
        "limit_per_s": round(limit_per_s, 3),
        "max_accepted_1s": stats.get("max_accepted_1s"),
        "drain_s": round(drain, 3),
        "ideal_s": round(ideal, 3),
        "utilisation": round(ideal / drain, 3) if drain > 0 else None,
    }


@contextlib.contextmanager
def _sims(config: VesselConfig) -> Iterator[tuple[CustomsSim, TosSim]]:
    customs = CustomsSim(
        rate=config.customs_rate, burst=config.customs_burst, suspend_after=5, suspend_s=30
    )
    tos = TosSim(max_connections=config.tos_connections, service_s=config.tos_service_s)
    with customs, tos:
        yield customs, tos


def run_vessel_demo(
    url: str,
    config: VesselConfig,
    *,
    on_sample: Callable[[Sample, int], None] | None = None,
    log_dir: Path | None = None,
    interval_s: float = 0.5,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run the scenario against Redis at ``url``; return (report, samples).

    Args:
        url: Redis for broker and gate state.
        config: the scenario's knobs.
        on_sample: called with each sample and the number submitted (live view).
        log_dir: worker logs go here (JSON decision events).
        interval_s: sampling period.
    """
    prefix = f"tidegate-demo-{uuid.uuid4().hex[:8]}"
    client = client_from_url(url)
    parking = ParkingLot(client, prefix=prefix)
    dlq = DeadLetterQueue(client, prefix=prefix)
    queues = list(TASK_FOR_QUEUE)
    samples: list[Sample] = []
    docs = list(vessel_burst(config.interchanges, seed=config.seed))
    with _sims(config) as (customs, tos):
        env = {
            "TIDEGATE_REDIS_URL": url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_CUSTOMS_URL": customs.url,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_CUSTOMS_RATE": repr(config.customs_rate),
            "TIDEGATE_CUSTOMS_BURST": str(max(1, config.customs_burst - 2)),
            "TIDEGATE_TOS_RATE": "1000",
            "TIDEGATE_TOS_BURST": "100",
            "TIDEGATE_TOS_CONCURRENCY": str(config.tos_connections),
            "TIDEGATE_MAX_WAIT_S": repr(config.max_wait_s),
        }
        pools = [
            Pool("customs", ["edi.customs"], concurrency=config.workers),
            Pool("tos", ["edi.tos"], concurrency=config.workers * 2),
        ]
        fleet = Fleet("tidegate.ops.vessel_app", pools, env=env, log_dir=log_dir)
        producer = Celery(broker=url)
        peak_rss = 0.0
        try:
            fleet.start()
            start = time.monotonic()
            submit_started = time.time()
            with producer.connection_for_write() as conn:
                for doc in docs:
                    producer.send_task(
                        TASK_FOR_QUEUE[doc.queue],
                        args=[doc.envelope()],
                        queue=doc.queue,
                        connection=conn,
                    )
            submit_s = time.time() - submit_started
            deadline = start + config.timeout_s
            while True:
                c_stats, t_stats = customs.stats(timeline=False), tos.stats(timeline=False)
                depth = queue_depths(client, queues)
                rss = sum(fleet.rss_mb().values())
                peak_rss = max(peak_rss, rss)
                sample = Sample(
                    t=round(time.monotonic() - start, 3),
                    depth=depth,
                    accepted={"customs": c_stats["distinct_keys"], "tos": t_stats["distinct_keys"]},
                    responses_429=c_stats["responses_429"] + t_stats["responses_429"],
                    responses_503=c_stats["responses_503"] + t_stats["responses_503"],
                    parked=parking.depth(),
                    dead_lettered=len(dlq),
                    rss_mb=round(rss, 1),
                )
                samples.append(sample)
                if on_sample is not None:
                    on_sample(sample, len(docs))
                settled = sum(sample.accepted.values()) + sample.dead_lettered
                idle = sample.parked == 0 and not any(depth.values())
                if (settled >= len(docs) and idle) or time.monotonic() > deadline:
                    break
                time.sleep(interval_s)
            c_full, t_full = customs.stats(), tos.stats()
        finally:
            fleet.stop()
            producer.close()
    delivered = c_full["distinct_keys"] + t_full["distinct_keys"]
    dead = len(dlq)
    pending = samples[-1].parked + sum(samples[-1].depth.values()) if samples else 0
    report = {
        "scenario": "vessel",
        "submitted": len(docs),
        "submit_s": round(submit_s, 3),
        "delivered": delivered,
        "dead_lettered": dead,
        "quarantined": 0,
        "pending": pending,
        "lost": len(docs) - delivered - dead - pending,
        "duplicates": c_full["duplicates"] + t_full["duplicates"],
        "peak_worker_rss_mb": round(peak_rss, 1),
        "elapsed_s": samples[-1].t if samples else 0.0,
        "by_class": _count(d.document_class for d in docs),
        "downstreams": {
            "customs": _downstream_report(c_full, config.customs_rate),
            "tos": _downstream_report(t_full, config.tos_connections / config.tos_service_s),
        },
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
    }
    report["_timelines"] = {
        "customs": c_full.get("accept_timeline", []),
        "tos": t_full.get("accept_timeline", []),
        "t0": time.time() - (time.monotonic() - start),
    }
    cleanup_prefix(client, prefix)
    return report, samples


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def cleanup_prefix(client: Any, prefix: str) -> None:
    """Delete every key of a run and close the client."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
