"""The bulk scenario: a consolidated manifest fanned out per B/L, poison, fix, replay.

A carrier drops an IFCSUM with ``bls`` consignments. ``bulk.dispatch`` splits it and
runs the chord; ``bulk.aggregate`` forwards every B/L to the TOS through its gate. One
percent of the B/Ls name a consignee the TOS does not know yet: it answers 422 and
those B/Ls are dead-lettered with the reason — the batch still completes. Then the
reference data is fixed and the dead letters are replayed: the TOS ends with exactly
one copy of every B/L.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery

from tidegate._redis import client_from_url
from tidegate.bulk import BatchStore
from tidegate.bulk.celery import submit_manifest
from tidegate.edi.intake import Intake
from tidegate.edi.synthetic import synthetic_ifcsum
from tidegate.harness.burst_run import cleanup_prefix, peak_by_process, queue_depths
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.reconcile import reconcile
from tidegate.harness.scenarios.vessel import Sample
from tidegate.integrations.celery.gated import REPLAY_HEADER
from tidegate.load import DeadLetter, DeadLetterQueue
from tidegate.load.replay import replay_dead_letters
from tidegate.sim import TosSim

__all__ = ["BulkConfig", "run_bulk_demo"]


@dataclass(frozen=True, slots=True)
class BulkConfig:
    """The knobs of the bulk scenario."""

    bls: int = 2000
    poison_every: int = 100
    tos_connections: int = 4
    tos_service_s: float = 0.01
    workers: int = 2
    seed: int = 7
    timeout_s: float = 900.0


def _memory_look(fleet: Fleet, peak_rss: dict[str, float]) -> dict[str, dict[str, float]]:
    """Raise each pool's total peak in ``peak_rss``; return the main process and the
    largest child of each pool, MiB (the dispatch and parse children are in ``bulk``)."""
    by_process = {}
    for name, usage in fleet.rss_by_process().items():
        total = usage.main_mb + sum(usage.children_mb.values())
        peak_rss[name] = max(peak_rss.get(name, 0.0), total)
        by_process[name] = {
            "main": round(usage.main_mb, 1),
            "child": round(max(usage.children_mb.values(), default=0.0), 1),
        }
    return by_process


def run_bulk_demo(
    url: str,
    config: BulkConfig,
    *,
    on_sample: Callable[[Sample, int], None] | None = None,
    log_dir: Path | None = None,
    interval_s: float = 0.5,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run the scenario against Redis at ``url``; return (report, samples)."""
    prefix = f"tidegate-bulk-{uuid.uuid4().hex[:8]}"
    batch_id = f"manifest-{config.seed}"
    client = client_from_url(url)
    dlq = DeadLetterQueue(client, prefix=prefix)
    text = synthetic_ifcsum(config.bls, seed=config.seed, bl_every=("BM",)).decode()
    bls = [str(u.bl_number) for r in Intake(text.encode()) for u in r.units]
    poison = set(bls[:: config.poison_every]) if config.poison_every else set()
    samples: list[Sample] = []
    peak_rss: dict[str, float] = {}
    with TosSim(max_connections=config.tos_connections, service_s=config.tos_service_s) as tos:
        tos.reject_keys(poison)
        env = {
            "TIDEGATE_REDIS_URL": url,
            "TIDEGATE_PREFIX": prefix,
            "TIDEGATE_TOS_URL": tos.url,
            "TIDEGATE_CUSTOMS_URL": tos.url,
            "TIDEGATE_TOS_RATE": "1000",
            "TIDEGATE_TOS_BURST": "100",
            "TIDEGATE_TOS_CONCURRENCY": str(config.tos_connections),
        }
        pools = [
            Pool("bulk", ["bulk.dispatch", "bl.parse"], concurrency=config.workers),
            Pool("tos", ["edi.tos"], concurrency=config.workers),
        ]
        fleet = Fleet("tidegate.harness.vessel_app", pools, env=env, log_dir=log_dir)
        producer = Celery(broker=url, backend=url)
        start = time.monotonic()

        def look() -> Sample:
            stats = tos.stats(timeline=False)
            by_process = _memory_look(fleet, peak_rss)
            sample = Sample(
                t=round(time.monotonic() - start, 3),
                depth=queue_depths(client, ["bulk.dispatch", "bl.parse", "edi.tos"]),
                accepted={"tos": stats["distinct_keys"]},
                responses_429=stats["responses_429"],
                responses_503=stats["responses_503"],
                parked=0,
                dead_lettered=len(dlq),
                rss_mb=round(sum(peak_rss.values()), 1),
                rss_by_process=by_process,
            )
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample, len(bls))
            return sample

        def wait(done: Callable[[Sample], bool]) -> None:
            while not done(look()) and time.monotonic() - start < config.timeout_s:
                time.sleep(interval_s)

        try:
            fleet.start()
            start = time.monotonic()
            dispatched_at = time.time()
            # By claim check: the message carries the batch id, the bytes wait in Redis.
            submit_manifest(producer, BatchStore(client, prefix=prefix), batch_id, text.encode())
            wait(lambda s: s.accepted["tos"] + s.dead_lettered >= len(set(bls)))
            fanned_out_s = time.monotonic() - start
            dead_at_peak = len(dlq)
            tos.reject_keys(())  # the fix: the TOS learns the missing consignees

            def publish(letter: DeadLetter) -> None:
                producer.send_task(
                    letter.task,
                    args=letter.payload["args"],
                    kwargs=letter.payload["kwargs"],
                    queue=letter.payload["queue"],
                    headers={REPLAY_HEADER: letter.replays + 1},
                )

            replayed = replay_dead_letters(dlq, publish, limit=max(1, dead_at_peak)).published
            wait(lambda s: s.dead_lettered == 0 and s.accepted["tos"] >= len(set(bls)))
            final = tos.stats(timeline=False)
            accepted, letters_left = Counter(tos.accepted_keys()), list(dlq.iter())
            summary = BatchStore(client, prefix=prefix).summary(batch_id) or {}
        finally:
            fleet.stop()
            producer.close()
    # The TOS records B/L numbers; a dead letter names its B/L too.
    outcome = reconcile(
        bls,
        accepted=accepted,
        dead_lettered=(letter.bl_number for letter in letters_left if letter.bl_number),
    )
    report = {
        "scenario": "bulk",
        "submitted": len(outcome.outcome),
        "delivered": outcome.count("delivered"),
        "dead_lettered": dead_at_peak,
        "dead_lettered_after_replay": len(dlq),
        "replayed": replayed,
        "quarantined": 0,
        "lost": outcome.count("lost"),
        "lost_keys": outcome.keys("lost")[:20],
        "duplicates": final["duplicates"],
        "batch": summary,
        "aggregate_s": (
            round(summary["aggregated_at"] - dispatched_at, 3)
            if "aggregated_at" in summary
            else None
        ),
        "fan_out_s": round(fanned_out_s, 3),
        "bls_per_s": round(len(bls) / fanned_out_s, 1) if fanned_out_s else None,
        "elapsed_s": samples[-1].t if samples else 0.0,
        "peak_worker_rss_mb": {name: round(v, 1) for name, v in peak_rss.items()},
        "peak_worker_rss_mb_by_process": peak_by_process(samples),
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
    }
    cleanup_prefix(client, prefix)
    return report, samples
