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

The TOS pool is sized around the TOS's connection cap, not equal to it: a worker
waiting on a lease holds no connection, and between two calls each worker spends
``tos_overhead_s`` on its ledger writes, ack and next fetch with no connection held,
so the pool needs ``cap × (service + overhead) / service + 1`` processes
(:func:`tidegate.load.sizing.connection_workers`) to keep every connection busy.

The demo's intake refuses a document whose envelope is larger than
``VesselConfig.max_payload_bytes`` *before* it reaches the broker
(:class:`PayloadTooLarge`, event ``intake_refused``) and counts it as
``refused_at_intake``. A :class:`Disturbance` (the chaos scenarios of
:mod:`tidegate.harness.chaos`) can plug into a run: extra worker environment, extra
documents, a hook called every sampling period — also while Redis is away, when that
period's sample is skipped, not the run — and a last look before the run's keys are
deleted. The broker is Redis itself unless a :class:`~tidegate.harness.run_broker.RunBroker`
(a RabbitMQ vhost) is passed; tidegate's state stays on Redis either way.

Why one module of ~420 lines: the run and the types every variant plugs into
(:class:`VesselConfig`, :class:`Sample`, :class:`Submission`, :class:`RunHandles`,
:class:`Disturbance`) — the chaos, adaptive, console and RQ runs import them from here.
What does not depend on the engine is in :mod:`tidegate.harness.burst_run`.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis
from celery import Celery

from tidegate._redis import client_from_url
from tidegate.errors import BackendError, PayloadTooLarge
from tidegate.harness import front_door
from tidegate.harness.burst import vessel_burst
from tidegate.harness.burst_run import (
    TosHandle,
    burst_report,
    cleanup_prefix,
    queue_depths,
    rss_fields,
    sample_until_settled,
    simulated_downstreams,
    worker_env,
)
from tidegate.harness.celery_fleet import Fleet, Pool
from tidegate.harness.reconcile import Reconciliation, reconcile
from tidegate.harness.run_broker import RedisRunBroker, RunBroker
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.load.outstanding import Outstanding
from tidegate.load.payload import DEFAULT_MAX_PAYLOAD_BYTES, check_payload_size
from tidegate.load.sizing import PoolSize, pool_size
from tidegate.logging import get_logger
from tidegate.sim import CustomsSim, QuotaHeaders, TosSim

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "Disturbance",
    "PayloadTooLarge",
    "RunHandles",
    "Sample",
    "Submission",
    "VesselConfig",
    "check_payload_size",
    "run_vessel_demo",
    "tos_pool",
]

log = get_logger("tidegate.ops")

TASK_FOR_QUEUE = {"edi.customs": "edi.customs.submit", "edi.tos": "edi.tos.push"}

#: The largest envelope (compact JSON, bytes) the demo's intake publishes. One EDIFACT
#: interchange of this burst is well under 1 KiB; a quarter of a MiB is a file sent by
#: mistake (and the simulated downstreams refuse bodies above 1 MiB with 413 anyway).


#: What one TOS task costs a worker outside the downstream call (ledger writes, ack,
#: fetching the next message), seconds: measured from the busy share of a run with one
#: worker per connection (BENCHMARKS.md, "The TOS's connections").
TOS_OVERHEAD_S = 0.02


@dataclass(frozen=True, slots=True)
class VesselConfig:
    """The knobs of the scenario (the CLI's flags).

    ``tos_workers`` defaults to what keeps the TOS's connections busy
    (:func:`tos_pool`); ``app`` is the workers' ``-A``.
    """

    interchanges: int = 2000
    customs_rate: float = 10.0
    customs_burst: int = 3
    tos_connections: int = 4
    tos_service_s: float = 0.05
    workers: int = 2
    seed: int = 7
    timeout_s: float = 900.0
    max_wait_s: float = 10.0
    tos_workers: int | None = None
    tos_overhead_s: float = TOS_OVERHEAD_S
    #: Send the TOS calls through the relay's pipelined lanes, this many requests on
    #: each connection (``TIDEGATE_TOS_RELAY_DEPTH``); ``None``: each worker calls the
    #: TOS itself under a lease per call.
    tos_relay_depth: int | None = None
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    app: str = "tidegate.harness.vessel_app"
    #: Post the burst to a real intake service (:mod:`tidegate.harness.front_door`) rather
    #: than publish it from Python; a chaos run always publishes directly.
    front_door: bool = True
    #: ``(at_s, rate)`` steps of the customs sim's enforced rate (see
    #: :class:`~tidegate.sim.CustomsSim`); the adaptive scenario's maintenance dip.
    customs_schedule: tuple[tuple[float, float], ...] = ()
    #: Whether the customs sim advertises its quota (``"none"``: it must be learned).
    customs_quota_headers: QuotaHeaders = "minute"


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
    #: Per pool, the main process and the largest child, MiB.
    rss_by_process: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def largest_process_mb(self) -> float:
        """The largest single worker process of this look."""
        return max((v for pool in self.rss_by_process.values() for v in pool.values()), default=0.0)


@dataclass(frozen=True, slots=True)
class Submission:
    """One message the run publishes: its key, queue, task argument and what it is."""

    key: str
    queue: str
    envelope: Mapping[str, Any]
    kind: str = "document"


@dataclass
class RunHandles:
    """Everything a :class:`Disturbance` may look at or break during a run.

    ``t0`` is the monotonic instant of the submission, ``wall_t0`` the same instant as
    ``time.time()`` (the sims' timelines are ``time.time()`` floats).
    """

    url: str
    prefix: str
    client: redis.Redis
    fleet: Fleet
    customs: CustomsSim
    #: Read by every run; a disturbance that changes the TOS asks :attr:`tos_sim`.
    tos: TosHandle
    config: VesselConfig
    submissions: list[Submission] = field(default_factory=list)
    refused: list[Submission] = field(default_factory=list)
    t0: float = 0.0
    wall_t0: float = 0.0
    samples_skipped: int = 0
    broker: RunBroker | None = None

    @property
    def tos_sim(self) -> TosSim:
        """The TOS as a sim this process can change (a chaos run serves it here)."""
        if not isinstance(self.tos, TosSim):
            raise TypeError("this run's TOS is its own process: a disturbance cannot change it")
        return self.tos


class Disturbance(Protocol):
    """What a chaos scenario plugs into :func:`run_vessel_demo`."""

    def worker_env(self) -> Mapping[str, str]:
        """Environment added to (and overriding) the workers'."""
        ...

    def documents(self, burst: list[Submission]) -> list[Submission]:
        """The submissions of the run, given the burst (e.g. with poison mixed in)."""
        ...

    def started(self, run: RunHandles) -> None:
        """The sims and the fleet are up; nothing is submitted yet."""
        ...

    def tick(self, run: RunHandles, t: float) -> None:
        """Called every sampling period, ``t`` s after submission, Redis up or not."""
        ...

    def busy(self, t: float) -> bool:
        """Whether faults are still to come or in progress (the run cannot settle)."""
        ...

    def collect(self, run: RunHandles) -> dict[str, Any]:
        """A last look (Redis up) before the run's keys are deleted; goes in the report."""
        ...


def _take_sample(
    run: RunHandles, queues: list[str], parking: ParkingLot, dlq: DeadLetterQueue
) -> Sample:
    c_stats, t_stats = run.customs.stats(timeline=False), run.tos.stats(timeline=False)
    depth = (
        run.broker.depths(queues) if run.broker is not None else queue_depths(run.client, queues)
    )
    memory = run.fleet.rss_by_process()
    return Sample(
        t=round(time.monotonic() - run.t0, 3),
        depth=depth,
        accepted={"customs": c_stats["distinct_keys"], "tos": t_stats["distinct_keys"]},
        responses_429=c_stats["responses_429"] + t_stats["responses_429"],
        responses_503=c_stats["responses_503"] + t_stats["responses_503"],
        parked=parking.depth(),
        dead_lettered=len(dlq),
        **rss_fields(memory),
    )


def _submit(run: RunHandles, producer: Celery, limit_bytes: int) -> None:
    """The intake: refuse what is too large, publish the rest."""
    with producer.connection_for_write() as conn:
        for item in run.submissions:
            try:
                check_payload_size(item.envelope, limit_bytes=limit_bytes)
            except PayloadTooLarge:
                run.refused.append(item)
                continue
            producer.send_task(
                TASK_FOR_QUEUE[item.queue],
                args=[dict(item.envelope)],
                queue=item.queue,
                connection=conn,
            )


def _sample_until_settled(
    run: RunHandles,
    disturbance: Disturbance | None,
    on_sample: Callable[[Sample, int], None] | None,
    interval_s: float,
) -> list[Sample]:
    """Sample until everything published has settled and the disturbance is over."""
    queues = list(TASK_FOR_QUEUE)
    parking = ParkingLot(run.client, prefix=run.prefix)
    dlq = DeadLetterQueue(run.client, prefix=run.prefix)
    expected = len(run.submissions) - len(run.refused)

    def settled(sample: Sample) -> bool:
        done = sum(sample.accepted.values()) + sample.dead_lettered >= expected
        idle = sample.parked == 0 and not any(sample.depth.values())
        quiet = disturbance is None or not disturbance.busy(sample.t)
        return done and idle and quiet

    def tick(_last: Sample | None) -> None:
        if disturbance is not None:
            disturbance.tick(run, time.monotonic() - run.t0)

    samples, skipped = sample_until_settled(
        take=lambda: _take_sample(run, queues, parking, dlq),
        settled=settled,
        deadline=run.t0 + run.config.timeout_s,
        interval_s=interval_s,
        tick=tick,
        on_sample=None if on_sample is None else lambda s: on_sample(s, len(run.submissions)),
        # Redis is away (a restart, a failover): no sample this period, the run goes on.
        skip=(redis.exceptions.RedisError, BackendError, OSError),
    )
    run.samples_skipped += skipped
    return samples


def _outcome(run: RunHandles, broker: RunBroker, accepted: Counter[str]) -> Reconciliation:
    """Every submitted key's one outcome, from the parties' own records."""
    client, prefix = run.client, run.prefix
    return reconcile(
        (item.key for item in run.submissions),
        accepted=accepted,
        dead_lettered=(letter.key for letter in DeadLetterQueue(client, prefix=prefix).iter()),
        refused=(item.key for item in run.refused),
        pending=[
            *broker.pending_keys(list(TASK_FOR_QUEUE)),
            *(key for page in ParkingLot(client, prefix=prefix).iter_keys(500) for key in page),
        ],
    )


def _attach(
    report: dict[str, Any],
    *,
    intake: dict[str, Any] | None,
    chaos: dict[str, Any] | None,
    run: RunHandles,
    customs: Mapping[str, Any],
    tos: Mapping[str, Any],
) -> None:
    """The report's optional parts: the front door's figures, the chaos scenario's, and
    the accept timelines the plot draws (private: ``public()`` drops them)."""
    if intake is not None:
        report["intake"] = intake
    if chaos is not None:
        report["chaos"] = chaos
    report["_timelines"] = {
        "customs": customs.get("accept_timeline", []),
        "tos": tos.get("accept_timeline", []),
        "t0": run.wall_t0,
    }


def run_vessel_demo(
    url: str,
    config: VesselConfig,
    *,
    on_sample: Callable[[Sample, int], None] | None = None,
    log_dir: Path | None = None,
    interval_s: float = 0.5,
    disturbance: Disturbance | None = None,
    broker: RunBroker | None = None,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run the scenario against Redis at ``url``; return (report, samples).

    Args:
        url: Redis for broker and gate state.
        config: the scenario's knobs.
        on_sample: called with each sample and the number submitted (live view).
        log_dir: worker logs go here (JSON decision events).
        interval_s: sampling period.
        disturbance: a chaos scenario plugged into the run (:class:`Disturbance`);
            what it collects is the report's ``chaos`` entry.
        broker: the Celery broker when it is not the Redis at ``url`` (a RabbitMQ
            vhost, :func:`~tidegate.harness.run_broker.open_amqp_broker`); the caller
            closes it.
    """
    prefix = f"tidegate-demo-{uuid.uuid4().hex[:8]}"
    client = client_from_url(url)
    broker = broker if broker is not None else RedisRunBroker(url, client)
    docs = list(vessel_burst(config.interchanges, seed=config.seed))
    submissions = [Submission(d.key, d.queue, d.envelope()) for d in docs]
    if disturbance is not None:
        submissions = disturbance.documents(submissions)
    elif config.front_door:
        submissions = front_door.keyed_by_intake(submissions)
    intake: dict[str, Any] | None = None
    chaos: dict[str, Any] = {}
    with simulated_downstreams(config, tos_process=disturbance is None) as (customs, tos):
        env = {**worker_env(url, prefix, customs, tos, config), **broker.worker_env()}
        if disturbance is not None:
            env.update(disturbance.worker_env())
        pools = [
            Pool("customs", ["edi.customs"], concurrency=config.workers),
            Pool("tos", ["edi.tos"], concurrency=tos_pool(config).workers),
        ]
        fleet = Fleet(config.app, pools, env=env, log_dir=log_dir)
        producer = broker.producer()
        run = RunHandles(url, prefix, client, fleet, customs, tos, config, submissions)
        run.broker = broker
        untrack = broker.track(
            producer, list(TASK_FOR_QUEUE.values()), Outstanding(client, prefix=prefix)
        )
        try:
            fleet.start()
            if disturbance is not None:
                disturbance.started(run)
            run.t0, run.wall_t0 = time.monotonic(), time.time()
            if config.front_door and disturbance is None:
                intake = front_door.submit_through_front_door(run, producer, TASK_FOR_QUEUE)
            else:
                _submit(run, producer, config.max_payload_bytes)
            submit_s = time.monotonic() - run.t0
            samples = _sample_until_settled(run, disturbance, on_sample, interval_s)
            c_full, t_full = customs.stats(), tos.stats()
            if disturbance is not None:
                chaos = disturbance.collect(run)
            accepted = Counter(customs.accepted_keys()) + Counter(tos.accepted_keys())
        finally:
            untrack()
            fleet.stop()
            producer.close()
    report = burst_report(
        scenario="vessel",
        engine={"broker": broker.kind},
        outcome=_outcome(run, broker, accepted),
        submit_s=submit_s,
        customs=c_full,
        tos=t_full,
        samples=samples,
        samples_skipped=run.samples_skipped,
        classes=(d.document_class for d in docs),
        config=config,
        tos_pool=tos_pool(config),
    )
    _attach(
        report,
        intake=intake,
        chaos=chaos if disturbance is not None else None,
        run=run,
        customs=c_full,
        tos=t_full,
    )
    cleanup_prefix(client, prefix)
    return report, samples


def tos_pool(config: VesselConfig) -> PoolSize:
    """The TOS pool's processes: ``tos_workers`` when given, else enough to keep every
    TOS connection busy (the gate's TOS rate is far above what the connections allow,
    so only the connections bind)."""
    if config.tos_workers:
        return PoolSize(config.tos_workers, "given", f"tos_workers = {config.tos_workers}")
    return pool_size(
        rate=0.0,
        concurrency=config.tos_connections,
        service_s=config.tos_service_s,
        overhead_s=config.tos_overhead_s,
        depth=config.tos_relay_depth or 1,
    )
