"""The vessel burst through RQ workers: the same burst, sims, gates, lifecycle and report.

``tidegate demo --engine rq`` runs :func:`run_rq_vessel_demo`: the berthing burst of
:mod:`tidegate.harness.scenarios.vessel`, enqueued as JSON RQ jobs
(:mod:`tidegate.harness.rq_vessel_app`) on one queue per downstream, worked by real
``rq worker`` processes (:mod:`tidegate.harness.rq_fleet`), reported by the one reconciliation
(:func:`tidegate.harness.reconcile.reconcile`) from the sims' own records, the DLQ and what
RQ still holds (queued, scheduled, started).

The workers run each job in-process (``InProcessJsonWorker``) unless ``worker="fork"``
asks for RQ's work horse per job (``JsonWorker``). With ``--chaos kill-workers``
(:class:`RqKillWorkers`, victims chosen by :mod:`tidegate.harness.rq_kill`) whole workers
— and, forking, work horses — are SIGKILLed mid-burst and restarted. A killed work
horse's job is retried at once as a redelivery; a killed worker's job comes back when
RQ's maintenance finds it abandoned (or popped and never started). Either way the
lifecycle asks the downstream before sending again, after ``max_request_s`` (a
request still in flight when its worker died can land late): no document may be
lost or accepted twice.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
from rq.job import Job
from rq.queue import Queue
from rq.worker import Worker

from tidegate._redis import client_from_url, text
from tidegate.errors import PayloadTooLarge
from tidegate.harness.burst import vessel_burst
from tidegate.harness.burst_run import (
    burst_report,
    cleanup_prefix,
    rss_fields,
    sample_until_settled,
    simulated_downstreams,
    worker_env,
)
from tidegate.harness.reconcile import reconcile
from tidegate.harness.rq_fleet import RqFleet, RqPool
from tidegate.harness.rq_kill import chaos_checks, kill_one
from tidegate.harness.scenarios.vessel import Sample, Submission, VesselConfig
from tidegate.integrations.rq import JsonSerializer, json_queue
from tidegate.load import DeadLetterQueue
from tidegate.load.payload import check_payload_size
from tidegate.logging import get_logger

__all__ = ["RqKillWorkers", "run_rq_vessel_demo"]

log = get_logger("tidegate.ops")

FUNCTIONS = {
    "customs": "tidegate.harness.rq_vessel_app.submit_customs",
    "tos": "tidegate.harness.rq_vessel_app.push_tos",
}
_DOWNSTREAM_OF_QUEUE = {"edi.customs": "customs", "edi.tos": "tos"}
#: The RQ worker classes the demo can run: in-process (its default) or a horse per job.
WORKER_CLASSES = {
    "in-process": "tidegate.integrations.rq.InProcessJsonWorker",
    "fork": "tidegate.integrations.rq.JsonWorker",
}


@dataclass(frozen=True, slots=True)
class RqKillWorkers:
    """The RQ ``kill-workers`` chaos: what is killed, how often, until when.

    Attributes:
        fault_at_s: the first kill, seconds after submission.
        kill_every_s: seconds between two kills.
        main_kill_every: every Nth kill takes a whole worker (its process group).
        kill_until: stop once this share of the burst is delivered.
        max_request_s: how long a downstream may take to finish a request it took
            (``TIDEGATE_<NAME>_MAX_REQUEST_S``): a redelivered unit asks only after it.
    """

    fault_at_s: float = 3.0
    kill_every_s: float = 1.5
    main_kill_every: int = 4
    kill_until: float = 0.6
    max_request_s: float = 2.0
    seed: int = 7


@dataclass
class _Run:
    client: redis.Redis
    prefix: str
    fleet: RqFleet
    queues: dict[str, Queue]
    config: VesselConfig
    kill: RqKillWorkers | None
    rng: random.Random
    t0: float = 0.0
    kills: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    next_kill: float = 0.0
    stopped_at: float | None = None
    forks: bool = True


def _wait_ready(run: _Run, timeout_s: float = 60.0) -> None:
    """Until every worker has registered with RQ (a real condition, polled)."""
    deadline = time.monotonic() + timeout_s
    wanted = {name: sum(p.count for p in run.fleet.pools if p.name == name) for name in FUNCTIONS}
    while time.monotonic() < deadline:
        ready = {
            name: Worker.count(connection=run.client, queue=run.queues[name]) for name in FUNCTIONS
        }
        if all(ready[name] >= wanted[name] for name in FUNCTIONS):
            return
        time.sleep(0.2)


def _submit(run: _Run, submissions: list[Submission], limit_bytes: int) -> list[Submission]:
    """The intake: refuse what is too large, enqueue the rest (one pipeline)."""
    refused: list[Submission] = []
    by_queue: dict[str, list[Any]] = {name: [] for name in FUNCTIONS}
    for item in submissions:
        try:
            check_payload_size(item.envelope, limit_bytes=limit_bytes)
        except PayloadTooLarge:
            refused.append(item)
            continue
        name = _DOWNSTREAM_OF_QUEUE[item.queue]
        by_queue[name].append(
            Queue.prepare_data(FUNCTIONS[name], args=[dict(item.envelope)], result_ttl=3600)
        )
    for name, data in by_queue.items():
        if data:
            run.queues[name].enqueue_many(data)
    return refused


def _holdings(run: _Run) -> dict[str, int]:
    """What RQ still holds, per state: queued (also popped by a worker, not started),
    scheduled (parked) and started."""
    held = {"queued": 0, "scheduled": 0, "started": 0}
    for queue in run.queues.values():
        held["queued"] += queue.count + len(queue.intermediate_queue.get_job_ids())
        # Never RQ's count(): it cleans the registry up, and a cleanup without the
        # workers' exception handlers fails an abandoned job instead of giving it back.
        held["scheduled"] += queue.scheduled_job_registry.get_job_count(cleanup=False)
        held["started"] += queue.started_job_registry.get_job_count(cleanup=False)
    return held


def _take_sample(run: _Run, customs: Any, tos: Any, dlq: DeadLetterQueue) -> Sample:
    c_stats, t_stats = customs.stats(timeline=False), tos.stats(timeline=False)
    held = _holdings(run)
    memory = run.fleet.rss_by_process()
    return Sample(
        t=round(time.monotonic() - run.t0, 3),
        depth={
            **{f"edi.{name}": run.queues[name].count for name in FUNCTIONS},
            "started": held["started"],
        },
        accepted={"customs": c_stats["distinct_keys"], "tos": t_stats["distinct_keys"]},
        responses_429=c_stats["responses_429"] + t_stats["responses_429"],
        responses_503=c_stats["responses_503"] + t_stats["responses_503"],
        parked=held["scheduled"],
        dead_lettered=len(dlq),
        **rss_fields(memory),
    )


def _tick(run: _Run, t: float, delivered: int, expected: int) -> None:
    """Restart dead workers; while the chaos lasts, kill one process every period."""
    for name in list(run.fleet.procs):
        if not run.fleet.alive(name):
            run.fleet.restart(name)
            run.restarts += 1
    kill = run.kill
    if kill is None or run.stopped_at is not None or t < run.next_kill:
        return
    if delivered >= kill.kill_until * expected:
        run.stopped_at = t
        return
    killed = kill_one(
        run.fleet,
        run.rng,
        len(run.kills) + 1,
        main_kill_every=kill.main_kill_every,
        forks=run.forks,
    )
    if killed is None:
        return
    worker, pid, role = killed
    run.kills.append({"t": round(t, 2), "worker": worker, "role": role})
    log.warning("chaos_worker_killed", worker=worker, pid=pid, role=role)
    run.next_kill = t + kill.kill_every_s


def _sample_until_settled(
    run: _Run,
    *,
    customs: Any,
    tos: Any,
    expected: int,
    on_sample: Callable[[Sample, int], None] | None,
    interval_s: float,
) -> list[Sample]:
    """Sample until every unit settled, RQ holds nothing and the kills are over."""
    dlq = DeadLetterQueue(run.client, prefix=run.prefix)

    def tick(last: Sample | None) -> None:
        delivered = 0 if last is None else sum(last.accepted.values())
        _tick(run, time.monotonic() - run.t0, delivered, expected)

    def settled(sample: Sample) -> bool:
        done = sum(sample.accepted.values()) + sample.dead_lettered >= expected
        quiet = run.kill is None or run.stopped_at is not None
        return done and quiet and not any(_holdings(run).values())

    samples, _ = sample_until_settled(
        take=lambda: _take_sample(run, customs, tos, dlq),
        settled=settled,
        deadline=run.t0 + run.config.timeout_s,
        interval_s=interval_s,
        tick=tick,
        on_sample=None if on_sample is None else lambda s: on_sample(s, expected),
    )
    return samples


def _pending_keys(run: _Run) -> list[str]:
    """The keys RQ still holds at the end: queued, scheduled or started."""
    ids: list[str] = []
    for queue in run.queues.values():
        ids += queue.get_job_ids() + queue.intermediate_queue.get_job_ids()
        ids += queue.scheduled_job_registry.get_job_ids(cleanup=False)
        ids += queue.started_job_registry.get_job_ids(cleanup=False)
    keys = []
    for job_id in ids:
        try:
            job = Job.fetch(job_id, connection=run.client, serializer=JsonSerializer)
            keys.append(str(job.args[0]["key"]))
        except Exception:  # noqa: S112 - a job gone meanwhile holds nothing
            continue
    return keys


def _cleanup_rq(client: redis.Redis, prefix: str) -> None:
    for key in list(client.scan_iter(match="rq:job:*", count=1000)):
        origin = client.hget(key, "origin") or b""
        if text(origin).startswith(prefix):
            client.delete(key)
    keys = list(client.scan_iter(match=f"rq:*{prefix}*", count=1000))
    if keys:
        client.delete(*keys)


def _events(log_dir: Path | None, name: str) -> int:
    if log_dir is None:
        return 0
    needle = f'"event": "{name}"'
    return sum(path.read_text(errors="replace").count(needle) for path in log_dir.glob("rq-*.log"))


def run_rq_vessel_demo(
    url: str,
    config: VesselConfig,
    *,
    on_sample: Callable[[Sample, int], None] | None = None,
    log_dir: Path | None = None,
    interval_s: float = 0.5,
    kill: RqKillWorkers | None = None,
    worker: str = "in-process",
) -> tuple[dict[str, Any], list[Sample]]:
    """Run the vessel burst through RQ workers on Redis at ``url``; return (report, samples).

    ``worker`` picks the worker class (:data:`WORKER_CLASSES`): ``in-process`` runs
    each job in the worker process, ``fork`` forks a work horse per job (RQ's default).
    The report has the vessel demo's fields (``engine: "rq"``, ``rq_worker``); with
    ``kill``, also ``chaos`` (kills, restarts, recoveries, checks) and ``ok``.
    """
    prefix = f"tidegate-demo-rq-{uuid.uuid4().hex[:8]}"
    client = client_from_url(url)
    docs = list(vessel_burst(config.interchanges, seed=config.seed))
    submissions = [Submission(d.key, d.queue, d.envelope()) for d in docs]
    with simulated_downstreams(config, tos_process=True) as (customs, tos):
        env = worker_env(url, prefix, customs, tos, config)
        if kill is not None:
            for name in FUNCTIONS:
                env[f"TIDEGATE_{name.upper()}_MAX_REQUEST_S"] = repr(kill.max_request_s)
        queues = {name: json_queue(f"{prefix}-{name}", client) for name in FUNCTIONS}
        pools = [
            RqPool("customs", queues["customs"].name, config.workers),
            RqPool("tos", queues["tos"].name, config.tos_workers or config.workers * 2),
        ]
        fleet = RqFleet(url, pools, env=env, log_dir=log_dir, worker_class=WORKER_CLASSES[worker])
        rng = random.Random(kill.seed if kill is not None else config.seed)
        run = _Run(client, prefix, fleet, queues, config, kill, rng, forks=worker == "fork")
        try:
            fleet.start()
            _wait_ready(run)
            run.t0 = time.monotonic()
            run.next_kill = kill.fault_at_s if kill is not None else 0.0
            refused = _submit(run, submissions, config.max_payload_bytes)
            submit_s = time.monotonic() - run.t0
            expected = len(submissions) - len(refused)
            samples = _sample_until_settled(
                run,
                customs=customs,
                tos=tos,
                expected=expected,
                on_sample=on_sample,
                interval_s=interval_s,
            )
            c_full, t_full = customs.stats(), tos.stats()
            accepted = Counter(customs.accepted_keys()) + Counter(tos.accepted_keys())
            pending = _pending_keys(run)
        finally:
            fleet.stop()
    dead = [letter.key for letter in DeadLetterQueue(client, prefix=prefix).iter()]
    outcome = reconcile(
        (item.key for item in submissions),
        accepted=accepted,
        dead_lettered=dead,
        refused=(item.key for item in refused),
        pending=pending,
    )
    report = burst_report(
        scenario="vessel" if kill is None else "chaos:kill-workers",
        engine={"engine": "rq", "rq_worker": worker},
        outcome=outcome,
        submit_s=submit_s,
        customs=c_full,
        tos=t_full,
        samples=samples,
        samples_skipped=0,
        classes=(d.document_class for d in docs),
        config=config,
    )
    if kill is not None:
        report["chaos"] = _chaos(run, report, kill, log_dir)
        report["ok"] = all(check["ok"] for check in report["chaos"]["checks"])
    report["_timelines"] = {
        "customs": c_full.get("accept_timeline", []),
        "tos": t_full.get("accept_timeline", []),
        "t0": time.time() - (time.monotonic() - run.t0),
    }
    _cleanup_rq(client, prefix)
    cleanup_prefix(client, prefix)
    return report, samples


def _chaos(
    run: _Run, report: dict[str, Any], kill: RqKillWorkers, log_dir: Path | None
) -> dict[str, Any]:
    roles = dict(Counter(k["role"] for k in run.kills))
    return {
        "name": "kill-workers (rq)",
        "kills": run.kills,
        "kills_by_role": roles,
        "restarts": run.restarts,
        "jobs_recovered": _events(log_dir, "rq_job_recovered"),
        "reconciled": _events(log_dir, "delivery_reconciled"),
        "knobs": asdict(kill),
        "checks": chaos_checks(roles, report, forks=run.forks),
    }
