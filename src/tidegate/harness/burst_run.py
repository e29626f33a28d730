"""What a vessel-burst run is made of, whichever engine works it (Celery or RQ).

The Celery run (:func:`~tidegate.harness.scenarios.vessel.run_vessel_demo`) and the RQ
run (:func:`~tidegate.harness.scenarios.rq_vessel.run_rq_vessel_demo`) differ in how
they publish, what one sample reads and how they recover from a killed worker;
everything else is here, once: the simulated downstreams, the workers' environment,
the sampling loop, the samples' memory fields, the end-of-run look at what is still
queued, and :func:`burst_report` — the report both engines print, computed from the
one per-key reconciliation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tidegate.harness.reconcile import keys_in_messages
from tidegate.keys import Keyspace
from tidegate.sim import CustomsSim, SimProcess, TosSim

if TYPE_CHECKING:
    from tidegate.harness.celery_fleet import PoolMemory
    from tidegate.harness.reconcile import Reconciliation
    from tidegate.harness.scenarios.vessel import Sample, VesselConfig
    from tidegate.load import ParkingLot
    from tidegate.load.sizing import PoolSize

__all__ = [
    "TosHandle",
    "burst_report",
    "cleanup_prefix",
    "count_by",
    "downstream_report",
    "peak_by_process",
    "pending_keys",
    "queue_depths",
    "rss_fields",
    "sample_until_settled",
    "simulated_downstreams",
    "worker_env",
]


def burst_report(
    *,
    scenario: str,
    engine: Mapping[str, Any],
    outcome: Reconciliation,
    submit_s: float,
    customs: Mapping[str, Any],
    tos: Mapping[str, Any],
    samples: list[Sample],
    samples_skipped: int,
    classes: Iterable[str],
    config: VesselConfig,
    tos_pool: PoolSize | None = None,
) -> dict[str, Any]:
    """The report of a vessel-burst run: the same fields, in the same order, for every
    engine.

    Args:
        scenario: ``"vessel"``, or the chaos scenario's name.
        engine: what says which engine and broker ran it (``{"broker": "redis"}``,
            ``{"engine": "rq"}``), placed right after ``scenario``.
        outcome: the per-key reconciliation: every count of the report's head.
        customs, tos: the simulated downstreams' full stats (their own records).
        classes: each submitted document's class, for ``by_class``.
        tos_pool: how the TOS pool was sized, when the engine sizes it that way.
    """
    tos_figures = downstream_report(
        tos, config.tos_connections / config.tos_service_s, f"{config.tos_connections} connections"
    )
    if tos_pool is not None:
        tos_figures.update(pool_workers=tos_pool.workers, pool_reason=tos_pool.reason)
    return {
        "scenario": scenario,
        **engine,
        **outcome.report_fields(),
        "submit_s": round(submit_s, 3),
        "duplicates": customs["duplicates"] + tos["duplicates"],
        "peak_worker_rss_mb": max((s.rss_mb for s in samples), default=0.0),
        "peak_worker_rss_mb_by_process": peak_by_process(samples),
        "elapsed_s": samples[-1].t if samples else 0.0,
        "samples_skipped": samples_skipped,
        "by_class": count_by(classes),
        "downstreams": {
            "customs": downstream_report(
                customs, config.customs_rate, f"{config.customs_rate:g}/s"
            ),
            "tos": tos_figures,
        },
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
    }


def sample_until_settled(
    *,
    take: Callable[[], Sample],
    settled: Callable[[Sample], bool],
    deadline: float,
    interval_s: float,
    tick: Callable[[Sample | None], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    skip: tuple[type[BaseException], ...] = (),
) -> tuple[list[Sample], int]:
    """Sample every ``interval_s`` until a sample is ``settled`` or ``deadline``
    (``time.monotonic()``) passes; return the samples and how many were skipped.

    ``tick`` runs before every sample, given the last one taken (``None`` before the
    first): the run's disturbance — a fault to inject, a dead worker to restart — goes
    on even while samples fail. A sample that raises one of ``skip`` (Redis away during
    a restart) is counted and skipped, and the run goes on.
    """
    samples: list[Sample] = []
    skipped = 0
    while True:
        if tick is not None:
            tick(samples[-1] if samples else None)
        try:
            sample = take()
        except skip:
            skipped += 1
        else:
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
            if settled(sample):
                return samples, skipped
        if time.monotonic() > deadline:
            return samples, skipped
        time.sleep(interval_s)


#: A TOS the run reads (its stats and accepted keys) but does not disturb.
TosHandle = TosSim | SimProcess


@contextlib.contextmanager
def simulated_downstreams(
    config: VesselConfig, *, tos_process: bool = False
) -> Iterator[tuple[CustomsSim, TosHandle]]:
    """The run's customs gateway and TOS on loopback.

    ``tos_process``: serve the TOS from its own process (:class:`SimProcess`), as a
    real TOS is, so its answers do not queue behind the intake and senders of this
    process — a run that only reads it (the demo). A chaos run changes the TOS while
    it runs (slower service, faults) and keeps it in this process.
    """
    tos: TosHandle
    if tos_process:
        tos = SimProcess(
            "tos",
            "--max-connections",
            str(config.tos_connections),
            "--service-s",
            repr(config.tos_service_s),
        )
    else:
        tos = TosSim(max_connections=config.tos_connections, service_s=config.tos_service_s)
    customs = CustomsSim(
        rate=config.customs_rate,
        burst=config.customs_burst,
        suspend_after=5,
        suspend_s=30,
        schedule=config.customs_schedule,
        quota_headers=config.customs_quota_headers,
    )
    with customs, tos:
        yield customs, tos


def worker_env(
    url: str, prefix: str, customs: CustomsSim, tos: TosHandle, config: VesselConfig
) -> dict[str, str]:
    return {
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
        **(
            {"TIDEGATE_TOS_RELAY_DEPTH": str(config.tos_relay_depth)}
            if config.tos_relay_depth
            else {}
        ),
    }


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


def rss_fields(memory: Mapping[str, PoolMemory]) -> dict[str, Any]:
    """A sample's memory fields from each pool's measurement: the fleet's total RSS and
    each pool's main process and largest child (the same for every engine)."""
    return {
        "rss_mb": round(sum(m.main_mb + sum(m.children_mb.values()) for m in memory.values()), 1),
        "rss_by_process": {
            name: {
                "main": round(m.main_mb, 1),
                "child": round(max(m.children_mb.values(), default=0.0), 1),
            }
            for name, m in memory.items()
        },
    }


def peak_by_process(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """Per pool, the peak RSS of its main process and of its largest child, MiB."""
    peaks: dict[str, dict[str, float]] = {}
    for sample in samples:
        for pool, usage in sample.rss_by_process.items():
            peak = peaks.setdefault(pool, {"main": 0.0, "child": 0.0})
            for role, value in usage.items():
                peak[role] = max(peak[role], value)
    return peaks


def downstream_report(stats: Mapping[str, Any], limit_per_s: float, limit: str) -> dict[str, Any]:
    """One downstream's figures; ``limit`` is its limit as its operator states it ("10/s",
    "4 connections"), ``limit_per_s`` the rate that limit allows (for the ideal time)."""
    first, last = stats.get("first_accept_ts"), stats.get("last_accept_ts")
    drain = (last - first) if first is not None and last is not None else 0.0
    calls = stats["distinct_keys"]
    ideal = calls / limit_per_s if limit_per_s else 0.0
    figures: dict[str, Any] = {
        "accepted": calls,
        "duplicates": stats["duplicates"],
        "responses_429": stats["responses_429"],
        "responses_503": stats["responses_503"],
        "limit": limit,
        "limit_per_s": round(limit_per_s, 3),
        "max_accepted_1s": stats.get("max_accepted_1s"),
        "drain_s": round(drain, 3),
        "ideal_s": round(ideal, 3),
        "utilisation": round(ideal / drain, 3) if drain > 0 else None,
    }
    if "busy_share" in stats:  # a connection-limited downstream's own service record
        share = stats["busy_share"]
        figures["busy_share"] = None if share is None else round(share, 3)
    return figures


def count_by(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def pending_keys(client: Any, queues: list[str], parking: ParkingLot) -> list[str]:
    """The keys still on their way at the end of a run: in a queue, in ``unacked`` or
    parked (read whole: this runs once, after the run, on the run's own Redis)."""
    raws: list[bytes] = []
    for queue in queues:
        raws.extend(client.lrange(queue, 0, -1))
    raws.extend(client.hvals("unacked"))
    parked = [key for page in parking.iter_keys(500) for key in page]
    return [*keys_in_messages(raws), *parked]


def cleanup_prefix(client: Any, prefix: str) -> None:
    """Delete every key of a run and close the client."""
    keys = list(client.scan_iter(match=Keyspace(prefix).everything(), count=1000))
    if keys:
        client.delete(*keys)
    client.close()
