"""Fault scenarios (issue 7): break one thing during a vessel burst, then account for it.

Each scenario is the vessel burst of :mod:`tidegate.harness.scenarios.vessel` — real Celery
workers, the gates, simulated customs and TOS — with one fault injected while it
drains, on its own embedded Redis (a chaos run kills things; it never touches a shared
server):

``kill-workers``
    SIGKILL a random worker process every few seconds: pool children (Celery replaces
    them; ``reject_on_worker_lost`` requeues their message at once) and, every Nth
    kill, a worker *main* process, which the harness restarts. A main's prefetched
    message sits in kombu's ``unacked`` hash until the visibility timeout: the
    scenario's workers run with a short one (see :class:`WorkerTiming`).
``redis-restart``
    SIGKILL Redis (AOF ``everysec``, the production setting) mid-burst, keep it down,
    start it again on the same port and directory. The gate fails closed meanwhile.
    The customs gate is paused across the outage, so customs documents are parked in
    Redis when it dies; the movers must bring them back and the gate pace them.
``host-crash``
    ``redis-restart`` as a host crash: Redis is SIGKILLed and its append-only file is
    cut back to its size ``aof_lost_s`` (1 s) before — what ``appendfsync everysec``
    loses with the machine; killing the process alone loses nothing. Delivered marks
    and the broker's pops of the messages they settled are gone: the ledger must not
    be believed (a restart puts it in doubt, and a redelivery asks the downstream).
``downstream-outage``
    The customs gateway answers 503, then refuses connections, for ``fault_s``.
``slow-downstream``
    The TOS gets ``slow_factor`` × slower for ``fault_s``, with more TOS worker
    processes than TOS connections: the concurrency leases must hold the cap.
``slow-commit``
    The TOS records a document only when the request finishes, and from ``fault_at_s``
    a few of its requests (``stragglers``, one in five) take 4 s longer than the
    workers' soft time limit while the rest go through: the task gives up, the TOS
    still commits. The workers know the TOS's ``max_request_s``
    (``TIDEGATE_TOS_MAX_REQUEST_S``): no lookup, no resend before it.
``broker-restart``
    RabbitMQ as the broker (a private node), SIGKILLed mid-burst and booted again
    (:mod:`tidegate.harness.chaos.amqp`; ``--broker amqp://…`` runs ``kill-workers`` and
    ``downstream-outage`` on RabbitMQ too).
``redis-oom``
    Redis refuses every write (``OOM``: ``maxmemory`` with ``noeviction``) for
    ``fault_s`` mid-burst, then takes writes again (:mod:`tidegate.harness.chaos.redis_oom`):
    the workers must wait and resume, losing, repeating and dead-lettering nothing.
``poison``
    Malformed documents (truncated, not EDIFACT, broken references, an envelope
    without a body) are mixed into the burst, plus oversized ones that the intake must
    refuse before the broker.

After every scenario the same invariant is checked: every submitted document is
delivered, dead-lettered, quarantined or refused at intake — or reported pending —
and the downstreams accepted each idempotency key once. A fault that strikes between a
downstream's acceptance and the delivery-ledger mark (a SIGKILL, Redis dying) leaves
the ledger at ``sending``: the redelivered message asks the downstream
(``delivery_reconciled`` events) instead of calling again. Any repeat that still
happens is counted, and ``kill-workers`` / ``redis-restart`` report whether it lies in
such a window. Scenario checks come on top (:func:`run_chaos` returns them in
``report["chaos"]["checks"]``).

The workers run the vessel app (:mod:`tidegate.harness.vessel_app`) through
``tidegate.harness.chaos.runner:worker_app``, which only shortens its time limits and the broker's
visibility timeout (``TIDEGATE_CHAOS_*``): the vessel app's own time limits are the
preset's (300 s hard), and its import-time check rightly refuses a visibility timeout
under 600 s. Everything else — tasks, gates, parking, DLQ, ledger — is the vessel app's.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import redis

from tidegate.delivery import RetryPolicy
from tidegate.edi.errors import EdifactError
from tidegate.edi.findings import Severity
from tidegate.edi.intake import Intake
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.flow.backends.base import GateKeys
from tidegate.harness.reconcile import reconcile
from tidegate.harness.report_view import public
from tidegate.harness.scenarios.vessel import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    TASK_FOR_QUEUE,
    RunHandles,
    Sample,
    Submission,
    VesselConfig,
    run_vessel_demo,
    tos_pool,
)
from tidegate.load import DeadLetterQueue, ParkingLot
from tidegate.logging import get_logger
from tidegate.redis_server import EmbeddedRedis
from tidegate.sim import max_in_window

if TYPE_CHECKING:
    from collections.abc import Callable

    from celery import Celery

__all__ = [
    "KINDS",
    "POISON_KINDS",
    "WORKER_APP",
    "ChaosConfig",
    "Check",
    "HorizonStats",
    "WorkerTiming",
    "benchmark_runs",
    "edifact_problem",
    "horizon_shorter_than",
    "poison_documents",
    "preset",
    "public",
    "retry_horizon",
    "run_chaos",
    "summary_row",
    "unplanned_dead_letters",
]

log = get_logger("tidegate.ops")

Kind = Literal[
    "kill-workers",
    "redis-restart",
    "host-crash",
    "downstream-outage",
    "slow-downstream",
    "slow-commit",
    "poison",
    "broker-restart",
    "redis-oom",
]
#: The scenarios, in the order the benchmark runs them.
KINDS: tuple[Kind, ...] = (
    "kill-workers",
    "redis-restart",
    "host-crash",
    "downstream-outage",
    "slow-downstream",
    "slow-commit",
    "poison",
    "broker-restart",
    "redis-oom",
)
#: The scenarios that restart Redis (on an append-only file, the production setting).
_RESTARTS = frozenset({"redis-restart", "host-crash"})
#: The ``-A`` of the scenario's workers: the vessel app with the timing below.
WORKER_APP = "tidegate.harness.chaos.runner:worker_app"

_ENV_SOFT = "TIDEGATE_CHAOS_SOFT_TIME_LIMIT_S"
_ENV_HARD = "TIDEGATE_CHAOS_HARD_TIME_LIMIT_S"
_ENV_VISIBILITY = "TIDEGATE_CHAOS_VISIBILITY_TIMEOUT_S"
_ENV_RESTORE = "TIDEGATE_CHAOS_RESTORE_INTERVAL_S"


# -- the workers' app ----------------------------------------------------------------


def _worker_app() -> Celery:
    """The vessel app with the chaos timing from the environment (idempotent)."""
    if "TIDEGATE_VISIBILITY_TIMEOUT_S" in os.environ:
        raise ConfigurationError(
            "the chaos workers set their own visibility timeout: unset "
            f"TIDEGATE_VISIBILITY_TIMEOUT_S and use {_ENV_VISIBILITY}"
        )
    from tidegate.harness import vessel_app
    from tidegate.integrations.celery import check_visibility_timeout

    app = vessel_app.app
    soft = float(os.environ.get(_ENV_SOFT, "25"))
    hard = float(os.environ.get(_ENV_HARD, "30"))
    restore = float(os.environ.get(_ENV_RESTORE, "1"))
    app.conf.task_soft_time_limit = soft
    app.conf.task_time_limit = hard
    app.conf.broker_transport_options = {
        **dict(app.conf.broker_transport_options or {}),
        "visibility_timeout": float(os.environ.get(_ENV_VISIBILITY, "60")),
        # kombu sweeps ``unacked`` every interval × throttle seconds (10 × 10 by
        # default): with a short visibility timeout the sweep must be short too.
        "unacked_restore_interval": restore,
        "unacked_restore_throttle": 1,
    }
    check_visibility_timeout(app)
    return app


def __getattr__(name: str) -> Celery:
    # ``celery -A tidegate.harness.chaos.runner:worker_app`` looks the app up here; building it
    # lazily keeps the vessel app (and its Celery instance) out of every other process.
    if name == "worker_app":
        return _worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class WorkerTiming:
    """Time limits, visibility timeout and lease length of the scenario's workers.

    Args:
        soft_time_limit_s: ``SoftTimeLimitExceeded`` after this (the task is parked).
        hard_time_limit_s: the pool process is killed after this.
        visibility_timeout_s: an unacknowledged message older than this is handed out
            again; at least 2 × the hard limit (the preset's rule), and the longest a
            message held by a SIGKILLed worker *main* process waits to be redelivered.
        restore_interval_s: how often each worker sweeps ``unacked`` for such messages.
        lease_s: concurrency lease length: how long a SIGKILLed holder keeps its slot.
        orphan_sweep_s: the fleet's orphan-sweep interval (a message the broker lost
            is republished after two to three of them).
    """

    soft_time_limit_s: float = 25.0
    hard_time_limit_s: float = 30.0
    visibility_timeout_s: float = 60.0
    restore_interval_s: float = 1.0
    lease_s: float = 5.0
    orphan_sweep_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.soft_time_limit_s < self.hard_time_limit_s:
            raise ConfigurationError("need 0 < soft_time_limit_s < hard_time_limit_s")
        if self.visibility_timeout_s < 2 * self.hard_time_limit_s:
            raise ConfigurationError("visibility_timeout_s must be >= 2 × hard_time_limit_s")
        if self.restore_interval_s <= 0 or self.lease_s <= 0:
            raise ConfigurationError("restore_interval_s and lease_s must be > 0")

    def env(self) -> dict[str, str]:
        return {
            _ENV_SOFT: repr(self.soft_time_limit_s),
            _ENV_HARD: repr(self.hard_time_limit_s),
            _ENV_VISIBILITY: repr(self.visibility_timeout_s),
            _ENV_RESTORE: repr(self.restore_interval_s),
            "TIDEGATE_CUSTOMS_LEASE_S": repr(self.lease_s),
            "TIDEGATE_TOS_LEASE_S": repr(self.lease_s),
            "TIDEGATE_SWEEP_INTERVAL_S": repr(self.orphan_sweep_s),
        }

    @property
    def worst_redelivery_s(self) -> float:
        """Longest a message of a killed main waits in ``unacked`` before it is requeued."""
        return self.visibility_timeout_s + self.restore_interval_s


# -- configuration -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    """One scenario run: the burst, the fault and the workers' timing.

    Args:
        kind: one of :data:`KINDS`.
        interchanges, customs_rate, customs_burst, tos_connections, tos_service_s,
            workers, tos_workers, seed, max_wait_s, timeout_s, max_payload_bytes: the
            vessel burst (:class:`~tidegate.harness.scenarios.vessel.VesselConfig`).
        fault_at_s: when the fault starts, seconds after the burst is submitted.
        fault_s: how long it lasts (outage, slowness, Redis down; for
            ``kill-workers`` the longest kill window).
        kill_every_s: ``kill-workers``: seconds between two kills.
        main_kill_every: ``kill-workers``: every Nth kill hits a worker main process.
        kill_until: ``kill-workers``: stop killing once this share is delivered.
        slow_factor: ``slow-downstream``: the TOS latency multiplier.
        poison_per_kind: ``poison``: documents of each malformed kind (and oversized).
        outage_backlog: ``downstream-outage``: start the outage (not before
            ``fault_at_s``) once at most this many customs documents are left.
        aof_lost_s: ``host-crash``: the seconds of append-only file lost with the host.
        stragglers: ``slow-commit``: TOS requests that outlive their task.
        label: tells apart two runs of one kind in a report.
        timing: the workers' time limits (:class:`WorkerTiming`).
    """

    kind: Kind
    interchanges: int = 2000
    customs_rate: float = 20.0
    customs_burst: int = 4
    tos_connections: int = 4
    tos_service_s: float = 0.05
    workers: int = 2
    tos_workers: int | None = None
    seed: int = 7
    max_wait_s: float = 10.0
    timeout_s: float = 900.0
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    fault_at_s: float = 5.0
    fault_s: float = 60.0
    kill_every_s: float = 3.0
    main_kill_every: int = 4
    kill_until: float = 0.95
    slow_factor: float = 20.0
    poison_per_kind: int = 5
    outage_backlog: int | None = None
    aof_lost_s: float = 1.0
    stragglers: int = 2
    label: str = ""
    timing: WorkerTiming = field(default_factory=WorkerTiming)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"unknown chaos kind {self.kind!r}; one of {KINDS}")
        if self.max_wait_s + 2.0 > self.timing.soft_time_limit_s:
            # A task waits in place up to max_wait_s, then calls the downstream.
            raise ConfigurationError("soft_time_limit_s must exceed max_wait_s + 2 s")

    @property
    def name(self) -> str:
        """The kind, and the label if any: ``downstream-outage (10 in flight)``."""
        return f"{self.kind} ({self.label})" if self.label else self.kind

    def vessel(self) -> VesselConfig:
        return VesselConfig(
            interchanges=self.interchanges,
            customs_rate=self.customs_rate,
            customs_burst=self.customs_burst,
            tos_connections=self.tos_connections,
            tos_service_s=self.tos_service_s,
            workers=self.workers,
            seed=self.seed,
            timeout_s=self.timeout_s,
            max_wait_s=self.max_wait_s,
            tos_workers=self.tos_workers,
            max_payload_bytes=self.max_payload_bytes,
            app=WORKER_APP,
        )


_TEST_TIMING = WorkerTiming(
    soft_time_limit_s=8.0,
    hard_time_limit_s=10.0,
    visibility_timeout_s=20.0,
    restore_interval_s=1.0,
    lease_s=3.0,
)


def preset(kind: str, size: Literal["full", "test"] = "full") -> ChaosConfig:
    """The benchmark's (``full``) or the test suite's (``test``, trimmed) run of ``kind``.

    Full sizes fit the whole benchmark in about a quarter of an hour on 2 cores;
    ``kill-workers`` is the 10,000-interchange burst of the issue.
    """
    if kind not in KINDS:
        raise ConfigurationError(f"unknown chaos kind {kind!r}; one of {KINDS}")
    if size == "test":
        base = ChaosConfig(
            kind,
            interchanges=300,
            customs_rate=10.0,
            customs_burst=3,
            max_wait_s=3.0,
            timeout_s=150.0,
            timing=_TEST_TIMING,
            fault_at_s=2.0,
            fault_s=10.0,
        )
        shapes: dict[str, dict[str, Any]] = {
            "kill-workers": {
                "fault_at_s": 1.0,
                "fault_s": 20.0,
                "tos_service_s": 0.15,
                "kill_every_s": 1.0,
                "main_kill_every": 3,
                "kill_until": 0.85,
            },
            "redis-restart": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "host-crash": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "downstream-outage": {"customs_rate": 5.0},
            "slow-downstream": {"fault_at_s": 1.0, "fault_s": 8.0, "tos_workers": 6},
            "slow-commit": {"fault_at_s": 1.0, "tos_service_s": 0.15},
            "poison": {"interchanges": 200, "poison_per_kind": 2},
            "broker-restart": {"fault_at_s": 3.0, "fault_s": 4.0, "tos_service_s": 0.15},
            "redis-oom": {"fault_at_s": 2.0, "fault_s": 8.0, "tos_service_s": 0.15},
        }
    else:
        base = ChaosConfig(kind)
        shapes = {
            "kill-workers": {
                "interchanges": 10_000,
                "customs_rate": 50.0,
                "customs_burst": 5,
                "fault_at_s": 3.0,
                "fault_s": 240.0,
            },
            "redis-restart": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            "host-crash": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            # The outage starts with 150 of the ~600 customs documents left: a parked
            # document queues behind the others again (FIFO, at the gate's rate), which
            # spaces its attempts out beyond its own backoff. ``tail`` (below) starts it
            # with 10 left, where each retries on its own backoff clock.
            "downstream-outage": {
                "interchanges": 2000,
                "customs_rate": 10.0,
                "customs_burst": 3,
                "fault_at_s": 10.0,
                "outage_backlog": 150,
                "label": "150 in flight",
            },
            "slow-downstream": {"interchanges": 3000, "tos_workers": 6},
            "slow-commit": {"interchanges": 3000, "fault_at_s": 10.0, "stragglers": 8},
            "poison": {"interchanges": 2000},
            # RabbitMQ (a private node) SIGKILLed 20 s in, down 10 s, booted again.
            "broker-restart": {"interchanges": 3000, "fault_at_s": 20.0, "fault_s": 10.0},
            # The incident: memory full for 25 s while the burst drains.
            "redis-oom": {"interchanges": 3000, "fault_at_s": 10.0, "fault_s": 25.0},
        }
    return replace(base, **shapes[kind])


def benchmark_runs(
    kinds: Sequence[str] = KINDS, size: Literal["full", "test"] = "full"
) -> list[ChaosConfig]:
    """The runs of ``bench/chaos.py``: each kind's preset; at full size the outage also
    once with only 10 customs documents in flight (each on its own backoff clock)."""
    runs = []
    for kind in kinds:
        config = preset(kind, size)
        runs.append(config)
        if kind == "downstream-outage" and size == "full":
            runs.append(replace(config, outage_backlog=10, label="10 in flight"))
    return runs


# -- checks --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One verified claim: what was measured, against what bound, and whether it held."""

    name: str
    ok: bool
    observed: Any
    bound: Any = None
    note: str = ""


def _check(name: str, ok: bool, observed: Any, bound: Any = None, note: str = "") -> Check:
    return Check(name, bool(ok), observed, bound, note)


def unplanned_dead_letters(
    letters: Sequence[Mapping[str, Any]], submissions: Sequence[Submission]
) -> list[str]:
    """Dead-lettered keys the scenario did not plan to dead-letter, sorted.

    A scenario plans dead letters only for the malformed documents it mixes in (any
    :class:`Submission` whose ``kind`` is not ``"document"``). A healthy document in the
    DLQ is still "accounted for" by the sum, so without this a run that dead-letters
    good work would pass every other check.
    """
    planned = {item.key for item in submissions if item.kind != "document"}
    return sorted({str(letter["key"]) for letter in letters} - planned)


# -- retry horizon -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HorizonStats:
    """How long a unit keeps being retried against an unavailable downstream.

    With ``max_attempts`` attempts there are ``max_attempts - 1`` backoff delays, delay
    *i* drawn uniformly from ``[0, min(cap, base × 2**i)]`` (full jitter). Their sum
    alone can be close to 0 s, so the unit also keeps retrying until it has been
    failing for ``min_horizon_s``: the *policy horizon* is the larger of the two, and
    the unit is dead-lettered if the downstream is still down after it. Queueing
    behind the backlog and gate waits add to it, so the real time to a dead letter is
    at least this — and never less than ``min_horizon_s``.
    """

    min_horizon_s: float
    delays: int
    ceilings_s: tuple[float, ...]
    mean_s: float
    max_s: float
    p01_s: float
    p05_s: float
    p50_s: float
    p95_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _horizon_samples(policy: RetryPolicy, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    ceilings = _ceilings(policy)
    return sorted(
        max(policy.min_horizon_s, sum(rng.uniform(0.0, c) for c in ceilings))
        for _ in range(samples)
    )


def _ceilings(policy: RetryPolicy) -> tuple[float, ...]:
    return tuple(
        min(policy.backoff_cap_s, policy.backoff_base_s * 2**i)
        for i in range(policy.max_attempts - 1)
    )


def retry_horizon(
    policy: RetryPolicy | None = None, *, samples: int = 50_000, seed: int = 0
) -> HorizonStats:
    """The distribution of the policy horizon (see :class:`HorizonStats`)."""
    policy = policy or RetryPolicy()
    ceilings = _ceilings(policy)
    drawn = _horizon_samples(policy, samples, seed)

    def quantile(q: float) -> float:
        return round(drawn[min(len(drawn) - 1, int(q * len(drawn)))], 2)

    return HorizonStats(
        min_horizon_s=policy.min_horizon_s,
        delays=len(ceilings),
        ceilings_s=ceilings,
        mean_s=round(sum(drawn) / len(drawn), 2),
        max_s=round(max(policy.min_horizon_s, sum(ceilings)), 2),
        p01_s=quantile(0.01),
        p05_s=quantile(0.05),
        p50_s=quantile(0.50),
        p95_s=quantile(0.95),
    )


def horizon_shorter_than(
    seconds: float, policy: RetryPolicy | None = None, *, samples: int = 50_000, seed: int = 0
) -> float:
    """P(policy horizon < ``seconds``): the chance that a unit retrying back to back
    through an outage of ``seconds`` is dead-lettered."""
    drawn = _horizon_samples(policy or RetryPolicy(), samples, seed)
    below = sum(1 for h in drawn if h < seconds)
    return round(below / len(drawn), 4)


# -- poison --------------------------------------------------------------------------

#: What a malformed document of each kind becomes, and the DLQ reason it must get.
POISON_KINDS: dict[str, str] = {
    "truncated": "downstream rejected the document (HTTP 400 truncated_interchange)",
    "not_edifact": "downstream rejected the document (HTTP 400 not_edifact)",
    "reference_mismatch": "downstream rejected the document (HTTP 400 message_reference_mismatch)",
    "missing_body": "malformed unit: envelope lacks 'body'",
}


def edifact_problem(body: Any) -> str | None:
    """A gateway's validation of a write: ``None``, or the code of what is wrong.

    The simulated downstreams run this on every write in the ``poison`` scenario
    (:meth:`tidegate.sim.SimServer.set_document_check`), as a real gateway validates
    what it is sent. It reads the EDIFACT with tidegate's own intake and answers with
    the first error-severity finding (``truncated_message``…), ``not_edifact`` for
    text that is not EDIFACT at all, and ``missing_edifact`` for a body without it.
    """
    if not isinstance(body, Mapping) or not isinstance(body.get("edifact"), str):
        return "missing_edifact"
    text: str = body["edifact"]
    try:
        intake = Intake(text.encode("latin-1", errors="replace"))
        results = list(intake)
    except EdifactError:
        return "not_edifact"
    findings = list(intake.findings)
    for result in results:
        findings.extend(result.all_findings())
    for finding in findings:
        if finding.severity is Severity.ERROR:
            return str(finding.code)
    return None if results else "no_message"


def _poison_envelope(kind: str, base: Mapping[str, Any], key: str) -> dict[str, Any]:
    envelope = {**dict(base), "key": key}
    text = str(base["body"])
    if kind == "truncated":
        envelope["body"] = text[: text.index("UNT+")]
    elif kind == "not_edifact":
        envelope["body"] = "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n"
    elif kind == "reference_mismatch":
        head, _, tail = text.partition("UNT+")
        count, _, rest = tail.partition("+")
        envelope["body"] = f"{head}UNT+{count}+XX{rest}"
    elif kind == "missing_body":
        del envelope["body"]
    elif kind == "oversized":
        filler = "FTX+AAI+++" + "X" * 350 + "'"
        segments = max(1, 2 * DEFAULT_MAX_PAYLOAD_BYTES // len(filler))
        envelope["body"] = text.replace("UNT+", filler * segments + "UNT+", 1)
    else:
        raise ConfigurationError(f"unknown poison kind {kind!r}")
    return envelope


def poison_documents(burst: Sequence[Submission], *, per_kind: int, seed: int) -> list[Submission]:
    """``burst`` with ``per_kind`` documents of each :data:`POISON_KINDS` kind and as
    many oversized ones inserted at random places (new idempotency keys)."""
    rng = random.Random(seed)
    mixed = list(burst)
    kinds = [*POISON_KINDS, "oversized"]
    for index in range(per_kind):
        for kind in kinds:
            base = rng.choice(burst)
            key = f"poison-{kind}-{index:03d}-{base.key[:12]}"
            envelope = _poison_envelope(kind, base.envelope, key)
            mixed.insert(rng.randrange(len(mixed) + 1), Submission(key, base.queue, envelope, kind))
    return mixed


# -- observations shared by every scenario -------------------------------------------


def _events(log_dir: Path | None, names: set[str]) -> list[dict[str, Any]]:
    """The worker log events named ``names`` (JSON lines), with ``t`` = Unix seconds."""
    if log_dir is None:
        return []
    found = []
    for path in sorted(log_dir.glob("worker-*.log")):
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.startswith("{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") in names and "ts" in event:
                    event["t"] = datetime.fromisoformat(event["ts"]).timestamp()
                    found.append(event)
    return found


def _lines(log_dir: Path | None, needle: str) -> list[str]:
    """Worker log lines (JSON or not) containing ``needle``."""
    if log_dir is None:
        return []
    found: list[str] = []
    for path in sorted(log_dir.glob("worker-*.log")):
        with path.open(encoding="utf-8", errors="replace") as handle:
            found.extend(line for line in handle if needle in line)
    return found


def _oldest_unacked_age(client: redis.Redis) -> float:
    """Seconds the oldest message in kombu's ``unacked`` hash has been held."""
    oldest = cast(
        "list[tuple[bytes, float]]", client.zrange("unacked_index", 0, 0, withscores=True)
    )
    if not oldest:
        return 0.0
    return max(0.0, time.time() - float(oldest[0][1]))


class _Scenario:
    """The common part: invariants, bookkeeping, the ``unacked`` age watch."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        self.config = config
        self.log_dir = log_dir
        self.max_unacked_age_s = 0.0
        self.timeline: list[dict[str, Any]] = []

    # Disturbance hooks ---------------------------------------------------------------

    def worker_env(self) -> Mapping[str, str]:
        return {**self.config.timing.env(), "TIDEGATE_LOG_LEVEL": "INFO"}

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return burst

    def started(self, run: RunHandles) -> None:
        pass

    def tick(self, run: RunHandles, t: float) -> None:
        try:
            age = _oldest_unacked_age(run.client)
        except (redis.exceptions.RedisError, OSError):
            return  # Redis is away: nothing to watch
        self.max_unacked_age_s = max(self.max_unacked_age_s, age)

    def busy(self, t: float) -> bool:
        return t < self.config.fault_at_s + self.config.fault_s

    def collect(self, run: RunHandles) -> dict[str, Any]:
        dlq = DeadLetterQueue(run.client, prefix=run.prefix)
        letters = [letter.summary() for letter in dlq.iter()]
        c_stats, t_stats = run.customs.stats(), run.tos.stats()
        accepted = Counter(run.customs.accepted_keys()) + Counter(run.tos.accepted_keys())
        refused = {item.key for item in run.refused}
        dead = {letter["key"] for letter in letters}
        outcome = reconcile(
            (item.key for item in run.submissions),
            accepted=accepted,
            dead_lettered=dead,
            refused=refused,
        )
        lost = outcome.keys("lost")
        live, expired = _leases(run.client, run.prefix, "tos")
        duplicates = sorted(k for k, n in accepted.items() if n > 1)
        queue_of = {item.key: item.queue for item in run.submissions}
        accepts = _accepts(run)
        return {
            "kind": self.config.kind,
            "timeline": self.timeline,
            "max_unacked_age_s": round(self.max_unacked_age_s, 2),
            "dead_letters": letters,
            "unplanned_dead_letters": unplanned_dead_letters(letters, run.submissions),
            "duplicate_keys": duplicates,
            "_duplicate_queues": {k: queue_of.get(k, "") for k in duplicates},
            "unaccounted_keys": lost,
            "refused_keys": sorted(refused),
            "tos_leases_live_at_end": live,
            "tos_leases_expired_at_end": expired,
            "customs_max_requests_1s": max_in_window(
                [t for t, _ in c_stats["request_timeline"]], 1.0
            ),
            "tos_max_concurrent_seen": t_stats["max_concurrent_seen"],
            "_customs": c_stats,
            "_tos": t_stats,
            "_accepts": accepts,
            "duplicate_accepts_s": {
                k: [round(at - run.wall_t0, 3) for at in accepts[k]] for k in duplicates
            },
        }

    # verdict -------------------------------------------------------------------------

    def checks(self, report: dict[str, Any]) -> list[Check]:
        """The invariant, checked after every scenario (scenarios add their own)."""
        chaos = report["chaos"]
        accounted = (
            report["delivered"]
            + report["dead_lettered"]
            + report["quarantined"]
            + report["refused_at_intake"]
            + report["pending"]
        )
        return [
            _check(
                "accounted",
                accounted == report["submitted"] and report["lost"] == 0,
                f"{report['submitted']} = {report['delivered']} delivered + "
                f"{report['dead_lettered']} dead-lettered + {report['quarantined']} quarantined"
                f" + {report['refused_at_intake']} refused + {report['pending']} pending",
                note="submitted = delivered + dead_lettered + quarantined + refused + pending",
            ),
            _check("nothing_pending", report["pending"] == 0, report["pending"], 0),
            _check(
                "every_key_accounted",
                not chaos["unaccounted_keys"],
                len(chaos["unaccounted_keys"]),
                0,
                "keys neither accepted downstream, dead-lettered nor refused at intake "
                "(pending ones included)",
            ),
            _check(
                "one_call_per_key",
                report["duplicates"] == 0,
                report["duplicates"],
                0,
                "downstream acceptances beyond the first, per idempotency key",
            ),
            _check(
                "no_unplanned_dead_letter",
                not chaos["unplanned_dead_letters"],
                len(chaos["unplanned_dead_letters"]),
                0,
                "healthy documents in the DLQ (only the scenario's malformed ones may be)",
            ),
        ]


def _leases(client: redis.Redis, prefix: str, name: str) -> tuple[int, int]:
    """(live, expired) concurrency leases of gate ``name``, on the Redis clock.

    An expired lease (its holder was killed) stays in the set until the next admission
    reclaims it; it no longer counts against the cap.
    """
    key = GateKeys.build(name, prefix=prefix).leases
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros / 1000
    live = int(client.zcount(key, f"({now_ms}", "+inf"))
    return live, int(client.zcard(key)) - live


def _accepts(run: RunHandles) -> dict[str, list[float]]:
    """Idempotency key → the instants (Unix s) it was accepted downstream."""
    accepts: dict[str, list[float]] = {}
    for sim in (run.customs, run.tos):
        keys = sim.accepted_keys()
        times = sim.stats()["accept_timeline"]
        # Both lists only grow, in the same order: if a call landed between the two
        # reads (a run that timed out), the shorter one still pairs up correctly.
        for key, at in zip(keys, times, strict=False):
            accepts.setdefault(key, []).append(at)
    return accepts


# -- kill-workers --------------------------------------------------------------------


class _KillWorkers(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.rng = random.Random(config.seed)
        self.kills: list[dict[str, Any]] = []
        self.restarts: list[dict[str, Any]] = []
        self.mains_killed: set[str] = set()
        self.next_kill = config.fault_at_s
        self.stopped_at: float | None = None
        self.expected = 0
        self.stolen: list[dict[str, Any]] = []

    def started(self, run: RunHandles) -> None:
        self.expected = len(run.submissions) - len(run.refused)

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        for name in list(run.fleet.procs):
            if not run.fleet.alive(name):
                # Either we killed its main, or a pool child was killed while the worker
                # was still starting: Celery then gives up ("Could not start worker
                # processes") and the main exits. A supervisor restarts it either way.
                cause = "main_killed" if name in self.mains_killed else "died_starting"
                self.mains_killed.discard(name)
                run.fleet.restart(name)
                self.restarts.append({"t": round(t, 2), "pool": name, "cause": cause})
                self.timeline.append(
                    {"t": round(t, 2), "event": "worker_restarted", "pool": name, "cause": cause}
                )
        if self.stopped_at is not None or t < self.next_kill:
            return
        delivered = (
            run.customs.stats(timeline=False)["distinct_keys"]
            + run.tos.stats(timeline=False)["distinct_keys"]
        )
        cfg = self.config
        if delivered >= cfg.kill_until * self.expected or t > cfg.fault_at_s + cfg.fault_s:
            self.stopped_at = t
            self.timeline.append({"t": round(t, 2), "event": "kills_stopped"})
            return
        self._kill_one(run, t)
        self.next_kill = t + cfg.kill_every_s

    def _kill_one(self, run: RunHandles, t: float) -> None:
        number = len(self.kills) + 1
        mains = run.fleet.main_pids()
        if number % self.config.main_kill_every == 0 and mains:
            pools = sorted(mains)
            pool = pools[(number // self.config.main_kill_every - 1) % len(pools)]
            pid, role = mains[pool], "main"
        else:
            children = [(name, pid) for name in mains for pid in run.fleet.child_pids(name)]
            if not children:
                return
            pool, pid = self.rng.choice(children)
            role = "child"
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if role == "main":
            self.mains_killed.add(pool)
            self._steal_one(run, pool, t)
        kill = {"t": round(t, 2), "wall": time.time(), "pool": pool, "pid": pid, "role": role}
        self.kills.append(kill)
        self.timeline.append({"t": kill["t"], "event": "sigkill", "pool": pool, "role": role})
        log.warning("chaos_worker_killed", pool=pool, pid=pid, role=role)

    def _steal_one(self, run: RunHandles, pool: str, t: float) -> None:
        """Make the kill the worst case kombu allows: the main had just BRPOPed a
        message and had not written it to ``unacked`` yet. That message is gone from
        the broker; only tidegate's orphan sweep can give it back."""
        raw = cast("bytes | None", run.client.rpop(f"edi.{pool}"))
        if raw is None:
            return
        task_id = str(json.loads(raw)["headers"]["id"])
        self.stolen.append({"t": round(t, 2), "pool": pool, "task_id": task_id})
        self.timeline.append({"t": round(t, 2), "event": "message_lost_with_main", "pool": pool})

    def busy(self, t: float) -> bool:
        return self.stopped_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        # A holder killed just before the run settled still has its lease: give the
        # leases the time to expire (a real condition, polled), then look.
        last_kill = max((k["wall"] for k in self.kills), default=0.0)
        deadline = last_kill + self.config.timing.lease_s + 1.0
        while _leases(run.client, run.prefix, "tos")[0] and time.time() < deadline:
            time.sleep(0.1)
        data = super().collect(run)
        reclaimed = _events(self.log_dir, {"gate_lease_reclaimed"})
        swept = _events(self.log_dir, {"orphan_republished"})
        stolen = {m["task_id"] for m in self.stolen}
        data.update(
            reconciled=_reconciled(self.log_dir),
            messages_lost_with_mains=len(self.stolen),
            orphans_republished=len(swept),
            lost_messages_swept_back=len({e.get("lost_task_id") for e in swept} & stolen),
            kills=self.kills,
            kills_by_role=dict(Counter(k["role"] for k in self.kills)),
            restarts=len(self.restarts),
            restarts_by_cause=dict(Counter(r["cause"] for r in self.restarts)),
            gate_leases_reclaimed=sum(int(e.get("leases", 1)) for e in reclaimed),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        timing = self.config.timing
        roles = chaos["kills_by_role"]
        # A call takes the TOS's service time; a second covers the answer and the mark.
        window_s = self.config.tos_service_s + 1.0
        windows = [(k["pool"], k["wall"] - window_s, k["wall"]) for k in chaos["kills"]]
        explained, unexplained = _explain_duplicates(chaos, windows)
        chaos["duplicates_explained"] = explained
        chaos["unexplained_duplicates"] = [
            _nearest_kill(key, chaos, report["_timelines"]["t0"]) for key in unexplained
        ]
        return [
            *super().checks(report),
            _check(
                "children_and_mains_killed",
                roles.get("child", 0) >= 1 and roles.get("main", 0) >= 1,
                roles,
                ">= 1 each",
            ),
            _check(
                "killed_mains_restarted",
                chaos["restarts_by_cause"].get("main_killed", 0) == roles.get("main", 0),
                chaos["restarts_by_cause"],
                {"main_killed": roles.get("main", 0)},
            ),
            _check(
                "no_lease_leaked",
                chaos["tos_leases_live_at_end"] == 0,
                chaos["tos_leases_live_at_end"],
                0,
                f"live TOS leases after the run; {chaos['tos_leases_expired_at_end']} expired "
                f"ones (killed holders, lease {timing.lease_s:g} s) await reclaiming, "
                f"{chaos['gate_leases_reclaimed']} were reclaimed during the run",
            ),
            _check(
                "tos_cap_held",
                chaos["tos_max_concurrent_seen"] <= self.config.tos_connections,
                chaos["tos_max_concurrent_seen"],
                self.config.tos_connections,
            ),
            _check(
                "redelivery_within_visibility",
                chaos["max_unacked_age_s"] <= timing.worst_redelivery_s + 3.0,
                chaos["max_unacked_age_s"],
                timing.worst_redelivery_s + 3.0,
                "oldest unacknowledged message seen (s): a killed main's message waits "
                "the visibility timeout, then the next sweep requeues it",
            ),
            _check(
                "lost_messages_swept_back",
                chaos["lost_messages_swept_back"] == chaos["messages_lost_with_mains"] >= 1,
                chaos["lost_messages_swept_back"],
                chaos["messages_lost_with_mains"],
                "messages taken off the broker with a killed main (as between kombu's BRPOP "
                f"and its unacked write) that the orphan sweep republished; "
                f"{chaos['orphans_republished']} republished in all",
            ),
            _check(
                "duplicates_only_from_kills",
                not unexplained,
                len(unexplained),
                0,
                "keys accepted twice whose first acceptance was not just before a kill "
                "of a process of that downstream's pool",
            ),
        ]


def _nearest_kill(key: str, chaos: dict[str, Any], t0: float) -> dict[str, Any]:
    """A duplicate no kill window explains: its acceptances and the kills around them."""
    first = chaos["_accepts"][key][0]
    kills = sorted(chaos["kills"], key=lambda k: abs(k["wall"] - first))[:3]
    return {
        "key": key,
        "queue": chaos["_duplicate_queues"].get(key),
        "accepts_s": [round(at - t0, 3) for at in chaos["_accepts"][key]],
        "nearest_kills": [
            {
                "pool": k["pool"],
                "role": k["role"],
                "after_first_accept_s": round(k["wall"] - first, 3),
            }
            for k in kills
        ],
    }


def _reconciled(log_dir: Path | None) -> dict[str, int]:
    """Units that asked the downstream before sending (``delivery_reconciled``), by answer."""
    events = _events(log_dir, {"delivery_reconciled"})
    return dict(Counter(str(e.get("outcome")) for e in events))


def _reconciled_by_basis(log_dir: Path | None) -> dict[str, dict[str, int]]:
    """The same, split by why the ledger's word was not enough (``basis``)."""
    by_basis: dict[str, Counter[str]] = {}
    for event in _events(log_dir, {"delivery_reconciled"}):
        by_basis.setdefault(str(event.get("basis")), Counter())[str(event.get("outcome"))] += 1
    return {basis: dict(counts) for basis, counts in sorted(by_basis.items())}


def _explain_duplicates(
    chaos: dict[str, Any], windows: Sequence[tuple[str | None, float, float]]
) -> tuple[int, list[str]]:
    """Split duplicated keys into those a fault explains and the rest.

    A fault between the downstream's acceptance and the delivery-ledger mark (a
    SIGKILL, Redis going away) loses the fleet's knowledge of the acceptance: the
    message comes back and calls again; the idempotency key makes the second call
    harmless. Such a duplicate's *first* acceptance lies inside a fault window
    ``(pool or None for any, start, end)`` in Unix seconds.
    """
    pool_of = {"edi.customs": "customs", "edi.tos": "tos"}
    queue_of = chaos["_duplicate_queues"]
    accepts = chaos["_accepts"]
    explained, unexplained = 0, []
    for key in chaos["duplicate_keys"]:
        pool = pool_of.get(queue_of.get(key, ""), "")
        at = accepts[key][0]
        if any((p is None or p == pool) and lo <= at <= hi for p, lo, hi in windows):
            explained += 1
        else:
            unexplained.append(key)
    return explained, unexplained


# -- redis-restart -------------------------------------------------------------------


class _RedisRestart(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None, server: EmbeddedRedis) -> None:
        super().__init__(config, log_dir)
        self.server = server
        self.killed_at: float | None = None
        self.restarted_at: float | None = None
        self.customs_paused = False
        self.parked_when_killed = 0
        self.host_crash = config.kind == "host-crash"
        self.aof_sizes: list[tuple[float, int]] = []
        self.aof_bytes_lost = 0
        self.aof_lost_s = 0.0

    def _kill(self) -> None:
        """SIGKILL Redis; for a host crash, also cut the AOF back ``aof_lost_s`` (at
        least: to the last size sampled that long ago; nothing if there is none)."""
        if not self.host_crash:
            self.server.kill()
            return
        now = time.time()
        cutoff = now - self.config.aof_lost_s
        earlier = [(at, size) for at, size in self.aof_sizes if at <= cutoff]
        if not earlier:
            self.server.kill()
            return
        at, size = earlier[-1]
        self.aof_bytes_lost = self.server.crash(keep_aof_bytes=size)
        self.aof_lost_s = round(now - at, 2)

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if not self.customs_paused:
            # A customs maintenance window that outlasts the Redis outage: customs
            # documents are parked in Redis when it dies; after it, the movers must bring
            # them back and the gate must pace the whole parked backlog at the rate.
            # The TOS keeps working: its calls are in flight when Redis dies.
            seconds = cfg.fault_at_s + cfg.fault_s + 3.0
            Gate(run.client, "customs", prefix=run.prefix).pause(seconds, "chaos_maintenance")
            self.customs_paused = True
            self.timeline.append({"t": round(t, 2), "event": "customs_gate_paused", "s": seconds})
        if self.killed_at is None and self.host_crash:
            self.aof_sizes.append((time.time(), self.server.aof_size()))
        if self.killed_at is None and t >= cfg.fault_at_s:
            self.parked_when_killed = ParkingLot(run.client, prefix=run.prefix).depth()
            self._kill()
            self.killed_at = time.time()
            event = "redis_host_crashed" if self.host_crash else "redis_killed"
            self.timeline.append({"t": round(t, 2), "event": event})
            log.warning(
                "chaos_redis_killed",
                port=self.server.port,
                aof_bytes_lost=self.aof_bytes_lost,
                aof_lost_s=self.aof_lost_s,
            )
        elif (
            self.restarted_at is None
            and self.killed_at is not None
            and t >= cfg.fault_at_s + cfg.fault_s
        ):
            self.server.start()
            self.restarted_at = time.time()
            self.timeline.append({"t": round(t, 2), "event": "redis_started"})
            log.warning("chaos_redis_started", port=self.server.port)

    def busy(self, t: float) -> bool:
        return self.restarted_at is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        down = (self.killed_at or 0.0, self.restarted_at or 0.0)
        # A call admitted just before the kill may land a little after it.
        grace = 1.0 + self.config.tos_service_s
        during: dict[str, int] = {}
        for name in ("customs", "tos"):
            timeline = data[f"_{name}"]["request_timeline"]
            during[name] = sum(1 for at, _ in timeline if down[0] + grace <= at < down[1])
        requeued = _events(self.log_dir, {"task_requeued"})
        killed = self.killed_at or 0.0
        lost_from = killed - self.aof_lost_s
        data.update(
            aof_bytes_lost=self.aof_bytes_lost,
            aof_lost_s=self.aof_lost_s,
            accepted_in_lost_window=sum(
                1
                for name in ("customs", "tos")
                for at in data[f"_{name}"]["accept_timeline"]
                if lost_from <= at <= killed
            ),
            reconciled_by_basis=_reconciled_by_basis(self.log_dir),
            reconciled=_reconciled(self.log_dir),
            redis_down_s=round(down[1] - down[0], 2),
            parked_when_redis_died=self.parked_when_killed,
            mover_thread_died=len(_lines(self.log_dir, "Exception in thread tidegate-mover")),
            requests_while_down=during,
            tasks_requeued=len(requeued),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        limit = cfg.customs_rate + cfg.customs_burst
        # Accepted in the last second before the kill: the ledger mark either failed
        # (Redis gone) or was lost with the AOF's last second (``everysec``).
        killed = self.killed_at or 0.0
        window = [(None, killed - 1.0 - cfg.tos_service_s, killed + 1.0)]
        explained, unexplained = _explain_duplicates(chaos, window)
        chaos["duplicates_explained"] = explained
        customs = report["downstreams"]["customs"]
        return [
            *super().checks(report),
            _check(
                "gate_closed_while_redis_down",
                sum(chaos["requests_while_down"].values()) == 0,
                chaos["requests_while_down"],
                0,
                "downstream requests while Redis was down (after a 1 s grace for calls "
                "already admitted)",
            ),
            _check(
                "customs_never_above_limit",
                chaos["customs_max_requests_1s"] <= limit and customs["responses_429"] == 0,
                {
                    "max_requests_1s": chaos["customs_max_requests_1s"],
                    "429": customs["responses_429"],
                },
                f"<= {limit:g} (rate + burst), 0 × 429",
            ),
            _check(
                "parked_messages_survived",
                chaos["parked_when_redis_died"] >= 1 and report["pending"] == 0,
                chaos["parked_when_redis_died"],
                ">= 1, all moved back and delivered",
                "messages parked in Redis (customs maintenance pause) when it was killed",
            ),
            _check(
                "duplicates_only_from_the_restart",
                not unexplained,
                len(unexplained),
                0,
                "keys accepted twice whose first acceptance was not in the second before "
                "Redis died",
            ),
            _check(
                "samples_skipped_not_run",
                report["samples_skipped"] >= 1,
                report["samples_skipped"],
                ">= 1",
                "the demo's sampling loop went on while Redis was away",
            ),
            *self._crash_checks(chaos),
        ]

    def _crash_checks(self, chaos: dict[str, Any]) -> list[Check]:
        if not self.host_crash:
            return []
        return [
            _check(
                "aof_tail_lost",
                chaos["aof_bytes_lost"] > 0 and chaos["aof_lost_s"] >= self.config.aof_lost_s,
                {"bytes": chaos["aof_bytes_lost"], "seconds": chaos["aof_lost_s"]},
                f"> 0 bytes, >= {self.config.aof_lost_s:g} s",
                "the AOF was cut back to its size that long before the kill",
            ),
            _check(
                "deliveries_in_the_lost_second",
                chaos["accepted_in_lost_window"] >= 1,
                chaos["accepted_in_lost_window"],
                ">= 1",
                "documents the downstreams accepted while the lost AOF tail was written: "
                "their ledger marks (and broker pops) are gone",
            ),
        ]


# -- downstream-outage ---------------------------------------------------------------


class _DownstreamOutage(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.phases: list[tuple[str, float, float]] = []
        self.backlog_at_start: int | None = None

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        half = cfg.fault_s / 2
        if not self.phases and t >= cfg.fault_at_s and self._due(run):
            self.backlog_at_start = self._customs_backlog(run)
            run.customs.set_outage(half, mode="503")
            now = time.time()
            self.phases.append(("503", now, now + half))
            self.timeline.append({"t": round(t, 2), "event": "customs_503"})
        elif len(self.phases) == 1 and time.time() >= self.phases[0][2]:
            run.customs.set_outage(half, mode="refuse")
            now = time.time()
            self.phases.append(("refuse", now, now + half))
            self.timeline.append({"t": round(t, 2), "event": "customs_refuse"})

    def _due(self, run: RunHandles) -> bool:
        limit = self.config.outage_backlog
        return limit is None or self._customs_backlog(run) <= limit

    def _customs_backlog(self, run: RunHandles) -> int:
        customs_docs = sum(1 for s in run.submissions if s.queue == "edi.customs")
        return customs_docs - int(run.customs.stats(timeline=False)["distinct_keys"])

    def busy(self, t: float) -> bool:
        return len(self.phases) < 2 or time.time() < self.phases[1][2]

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        start, end = self.phases[0][1], self.phases[-1][2]
        failures = [
            e
            for e in _events(self.log_dir, {"downstream_unavailable"})
            if e.get("downstream") == "customs" and start <= e["t"] <= end + 0.5
        ]
        sim_503 = sum(
            1
            for at, status in data["_customs"]["request_timeline"]
            if status == 503 and start <= at <= end
        )
        per_key = Counter(str(e.get("key_hash")) for e in failures)
        data.update(
            outage_s=round(end - start, 2),
            phases=[{"mode": m, "start": s, "end": e} for m, s, e in self.phases],
            backlog_at_start=self.backlog_at_start,
            calls_in_outage=len(failures),
            calls_per_s_in_outage=round(len(failures) / (end - start), 2),
            calls_in_outage_503_seen_by_sim=sim_503,
            calls_in_outage_refused=sum(
                1 for e in failures if "Connect" in str(e.get("error", ""))
            ),
            documents_tried_in_outage=len(per_key),
            max_calls_per_document=max(per_key.values(), default=0),
            horizon=retry_horizon().as_dict(),
            p_horizon_shorter_than_outage=horizon_shorter_than(end - start),
            exhausted=sum(
                1 for d in data["dead_letters"] if str(d["reason"]).startswith("retries exhausted")
            ),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        policy = RetryPolicy()
        gate_burst = max(1, cfg.customs_burst - 2)
        gate_bound = math.floor(cfg.customs_rate * chaos["outage_s"]) + gate_burst + cfg.workers
        # Up to max_attempts on the backoff ramp, then one probe per cap/2 at most.
        probes = math.ceil(chaos["outage_s"] / (policy.backoff_cap_s / 2))
        policy_bound = chaos["documents_tried_in_outage"] * (policy.max_attempts + probes)
        return [
            *super().checks(report),
            _check(
                "no_retry_storm",
                chaos["calls_in_outage"] <= min(gate_bound, policy_bound),
                chaos["calls_in_outage"],
                {"gate": gate_bound, "backoff": policy_bound},
                "customs calls during the outage ≤ min(rate × T + burst + in-flight, "
                "documents tried × (max_attempts + T / (cap/2)))",
            ),
            _check(
                "sim_saw_the_503_phase",
                chaos["calls_in_outage_503_seen_by_sim"] <= chaos["calls_in_outage"],
                chaos["calls_in_outage_503_seen_by_sim"],
                chaos["calls_in_outage"],
                "503s in the sim's request timeline vs failures the workers logged",
            ),
            _check(
                "no_dead_letter_from_outage",
                chaos["exhausted"] == 0,
                chaos["exhausted"],
                0,
                f"outage {chaos['outage_s']} s; policy horizon mean "
                f"{chaos['horizon']['mean_s']} s, P(horizon < outage) = "
                f"{chaos['p_horizon_shorter_than_outage']}",
            ),
            _check("customs_no_429", report["downstreams"]["customs"]["responses_429"] == 0, 0),
        ]


# -- slow-downstream -----------------------------------------------------------------


class _SlowDownstream(_Scenario):
    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.slow_from: float | None = None
        self.slow_until: float | None = None

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if self.slow_from is None and t >= cfg.fault_at_s:
            run.tos.set_service_s(cfg.tos_service_s * cfg.slow_factor)
            self.slow_from = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_slow"})
        elif self.slow_until is None and t >= cfg.fault_at_s + cfg.fault_s:
            run.tos.set_service_s(cfg.tos_service_s)
            self.slow_until = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_normal"})

    def busy(self, t: float) -> bool:
        return self.slow_until is None

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        start, end = self.slow_from or 0.0, self.slow_until or 0.0
        accepted = [a for a in data["_tos"]["accept_timeline"] if start <= a < end]
        parked = _events(self.log_dir, {"message_parked"})
        data.update(
            slow_s=round(end - start, 2),
            tos_accepted_while_slow=len(accepted),
            tos_rate_while_slow=round(len(accepted) / (end - start), 2) if end > start else 0.0,
            tos_capacity_while_slow=round(
                self.config.tos_connections / (self.config.tos_service_s * self.config.slow_factor),
                2,
            ),
            tos_parked_for_concurrency=sum(
                1
                for e in parked
                if e.get("reason") == "gate_concurrency" and e.get("task") == "edi.tos.push"
            ),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        cfg = self.config
        tos = report["downstreams"]["tos"]
        return [
            *super().checks(report),
            _check(
                "tos_cap_held",
                chaos["tos_max_concurrent_seen"] <= cfg.tos_connections
                and tos["responses_503"] == 0,
                {"max_concurrent": chaos["tos_max_concurrent_seen"], "503": tos["responses_503"]},
                f"<= {cfg.tos_connections}, 0 × 503",
                f"{tos_pool(cfg.vessel()).workers} TOS processes, gate concurrency "
                f"{cfg.tos_connections}",
            ),
            _check(
                "no_message_past_visibility",
                chaos["max_unacked_age_s"] < cfg.timing.visibility_timeout_s,
                chaos["max_unacked_age_s"],
                cfg.timing.visibility_timeout_s,
                "oldest unacknowledged message seen (s)",
            ),
        ]


# -- slow-commit ---------------------------------------------------------------------


class _SlowCommit(_Scenario):
    """The TOS commits at the end of each request; a few requests take 4 s longer than
    the task's soft time limit, so the task gives up first — and its retry, after the
    usual backoff of a second or so, would find nothing yet while the other TOS
    connections take the resend."""

    def __init__(self, config: ChaosConfig, log_dir: Path | None) -> None:
        super().__init__(config, log_dir)
        self.slow_service_s = config.timing.soft_time_limit_s + 4.0
        # What the TOS may take to finish a request it received, as its operator says.
        self.max_request_s = self.slow_service_s + 2.0
        self.slow_from: float | None = None

    def worker_env(self) -> Mapping[str, str]:
        return {**super().worker_env(), "TIDEGATE_TOS_MAX_REQUEST_S": repr(self.max_request_s)}

    def started(self, run: RunHandles) -> None:
        run.tos.set_commit_at_end()

    def tick(self, run: RunHandles, t: float) -> None:
        super().tick(run, t)
        cfg = self.config
        if self.slow_from is None and t >= cfg.fault_at_s:
            run.tos.set_stragglers(self.slow_service_s, count=cfg.stragglers, every=5)
            self.slow_from = time.time()
            self.timeline.append({"t": round(t, 2), "event": "tos_stragglers"})

    def busy(self, t: float) -> bool:
        return self.slow_from is None or time.time() < self.slow_from + self.max_request_s

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        parked = _events(self.log_dir, {"message_parked"})
        waits = [e for e in parked if e.get("reason") == "awaiting_downstream_commit"]
        given_up = [
            e
            for e in _events(self.log_dir, {"delivery_awaiting_commit"})
            if e.get("downstream") == "tos"
        ]
        data.update(
            slow_service_s=self.slow_service_s,
            max_request_s=self.max_request_s,
            tos_calls_given_up=len(given_up),
            given_up_by_error=dict(Counter(str(e.get("error")) for e in given_up)),
            parked_awaiting_commit=len(waits),
            reconciled_by_basis=_reconciled_by_basis(self.log_dir),
            reconciled=_reconciled(self.log_dir),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        return [
            *super().checks(report),
            _check(
                "calls_outlived_the_task",
                chaos["tos_calls_given_up"] >= 1,
                chaos["tos_calls_given_up"],
                ">= 1",
                f"TOS calls given up at the soft time limit while the TOS, taking "
                f"{chaos['slow_service_s']:g} s, committed them at the end; each parked "
                f"until max_request_s ({chaos['max_request_s']:g} s) after it started",
            ),
            _check(
                "late_commits_found_by_lookup",
                chaos["reconciled"].get("accepted_before", 0) >= 1,
                chaos["reconciled"],
                "accepted_before >= 1",
                "units whose lookup, asked after max_request_s, found the late commit",
            ),
        ]


# -- poison --------------------------------------------------------------------------


class _Poison(_Scenario):
    def documents(self, burst: list[Submission]) -> list[Submission]:
        return poison_documents(burst, per_kind=self.config.poison_per_kind, seed=self.config.seed)

    def started(self, run: RunHandles) -> None:
        run.customs.set_document_check(edifact_problem)
        run.tos.set_document_check(edifact_problem)

    def busy(self, t: float) -> bool:
        return False

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = super().collect(run)
        letters = {d["key"]: d for d in data["dead_letters"]}
        outcomes = []
        for item in run.submissions:
            if item.kind == "document":
                continue
            letter = letters.get(item.key)
            refused = item.key in data["refused_keys"]
            outcomes.append(
                {
                    "key": item.key,
                    "kind": item.kind,
                    "queue": item.queue,
                    "downstream_code": (
                        edifact_problem({"edifact": item.envelope["body"]})
                        if "body" in item.envelope and item.kind != "oversized"
                        else None
                    ),
                    "outcome": "refused_at_intake"
                    if refused
                    else ("dead_lettered" if letter else "other"),
                    "reason": letter["reason"] if letter else None,
                    "exception": letter["exception"] if letter else None,
                    "expected_reason": POISON_KINDS.get(item.kind),
                }
            )
        clean = {i.key for i in run.submissions if i.kind == "document"}
        data.update(
            poison=outcomes,
            clean_dead_lettered=sorted(k for k in letters if k in clean),
            reasons=dict(Counter(f"{o['kind']}: {o['reason']}" for o in outcomes)),
        )
        return data

    def checks(self, report: dict[str, Any]) -> list[Check]:
        chaos = report["chaos"]
        wrong = [
            o
            for o in chaos["poison"]
            if not (
                (o["kind"] == "oversized" and o["outcome"] == "refused_at_intake")
                or (o["outcome"] == "dead_lettered" and o["reason"] == o["expected_reason"])
            )
        ]
        clean = report["submitted"] - len(chaos["poison"])
        return [
            *super().checks(report),
            _check(
                "poison_dead_lettered_or_refused",
                not wrong,
                len(chaos["poison"]) - len(wrong),
                len(chaos["poison"]),
                "each malformed document in the DLQ with its reason; oversized refused",
            ),
            _check(
                "rest_of_burst_delivered",
                not chaos["clean_dead_lettered"] and report["delivered"] == clean,
                report["delivered"],
                clean,
            ),
            _check(
                "oversized_never_published",
                report["refused_at_intake"] == self.config.poison_per_kind,
                report["refused_at_intake"],
                self.config.poison_per_kind,
            ),
        ]


# -- running -------------------------------------------------------------------------


def _scenario(config: ChaosConfig, log_dir: Path | None, server: EmbeddedRedis) -> _Scenario:
    if config.kind == "kill-workers":
        return _KillWorkers(config, log_dir)
    if config.kind in _RESTARTS:
        return _RedisRestart(config, log_dir, server)
    if config.kind == "downstream-outage":
        return _DownstreamOutage(config, log_dir)
    if config.kind == "slow-downstream":
        return _SlowDownstream(config, log_dir)
    if config.kind == "slow-commit":
        return _SlowCommit(config, log_dir)
    if config.kind == "redis-oom":
        from tidegate.harness.chaos.redis_oom import RedisOom  # its module builds on this one

        return RedisOom(config, log_dir, server)
    return _Poison(config, log_dir)


class _FromSubmitted:
    """A scenario whose clock starts when the burst is submitted, as ``fault_at_s`` says.

    :func:`run_vessel_demo` counts ``t`` from the start of the submission and ticks only
    after it; on a loaded machine submitting 10,000 interchanges can outlast a whole
    fault window, and every fault would then strike the burst's tail. The first tick's
    ``t`` (the submission's length) is taken off every ``t`` the scenario sees.
    """

    def __init__(self, scenario: _Scenario) -> None:
        self.scenario = scenario
        self.offset_s: float | None = None

    def worker_env(self) -> Mapping[str, str]:
        return self.scenario.worker_env()

    def documents(self, burst: list[Submission]) -> list[Submission]:
        return self.scenario.documents(burst)

    def started(self, run: RunHandles) -> None:
        self.scenario.started(run)

    def tick(self, run: RunHandles, t: float) -> None:
        if self.offset_s is None:
            self.offset_s = t
        self.scenario.tick(run, t - self.offset_s)

    def busy(self, t: float) -> bool:
        return self.scenario.busy(t - (self.offset_s or 0.0))

    def collect(self, run: RunHandles) -> dict[str, Any]:
        data = self.scenario.collect(run)
        data["submit_s"] = round(self.offset_s or 0.0, 2)
        return data


def _drain_delays(report: dict[str, Any], config: ChaosConfig) -> dict[str, Any]:
    """Per downstream: when its last document settled, vs the ideal drain time."""
    chaos = report["chaos"]
    t0 = report["_timelines"]["t0"]
    capacity = {
        "customs": config.customs_rate,
        "tos": config.tos_connections / config.tos_service_s,
    }
    task_of = {"customs": TASK_FOR_QUEUE["edi.customs"], "tos": TASK_FOR_QUEUE["edi.tos"]}
    delays: dict[str, Any] = {}
    for name in ("customs", "tos"):
        accepted = report["_timelines"][name]
        failed = [d["last_failed_at"] for d in chaos["dead_letters"] if d["task"] == task_of[name]]
        settled_at = max([*accepted[-1:], *failed], default=t0) - t0
        ideal = report["downstreams"][name]["accepted"] / capacity[name]
        delays[name] = {
            "settled_s": round(settled_at, 2),
            "ideal_s": round(ideal, 2),
            "delay_s": round(max(0.0, settled_at - ideal), 2),
        }
    return delays


def run_chaos(
    config: ChaosConfig,
    *,
    broker_url: str | None = None,
    log_dir: Path | None = None,
    on_sample: Callable[[Sample, int], None] | None = None,
    interval_s: float = 0.5,
) -> tuple[dict[str, Any], list[Sample]]:
    """Run one scenario on its own embedded Redis; return (report, samples).

    ``report["chaos"]`` holds what the scenario observed and ``checks`` (a list of
    :class:`Check` as dicts), ``report["ok"]`` whether they all held. Keys starting
    with ``_`` are bulky raw data (timelines), left out of JSON output by callers.

    The scenario reads the workers' logs, so they are always written: to ``log_dir``
    when given (and kept, ``report["log_dir"]``), else to a temporary directory removed
    before this returns (``report["log_dir"]`` is then ``None``).

    With ``broker_url`` (``amqp://``), or for ``broker-restart``, RabbitMQ carries the
    messages (:mod:`tidegate.harness.chaos.amqp`).
    """
    with contextlib.ExitStack() as stack:
        kept = log_dir is not None
        if log_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix=f"tidegate-chaos-{config.kind}-")
            log_dir = Path(stack.enter_context(tmp))
        from tidegate.harness.chaos.amqp import amqp_chaos_run, amqp_scenario

        amqp = stack.enter_context(amqp_chaos_run(config, broker_url))
        server = EmbeddedRedis(appendonly=config.kind in _RESTARTS).start()
        try:
            scenario = (
                _scenario(config, log_dir, server)
                if amqp is None
                else amqp_scenario(config, log_dir, amqp)
            )
            report, samples = run_vessel_demo(
                server.url,
                config.vessel(),
                log_dir=log_dir,
                on_sample=on_sample,
                interval_s=interval_s,
                disturbance=_FromSubmitted(scenario),
                broker=None if amqp is None else amqp.broker,
            )
        finally:
            server.stop()
    report["scenario"] = f"chaos:{config.kind}"
    report["log_dir"] = str(log_dir) if kept else None
    chaos = report["chaos"]
    chaos["name"] = config.name
    checks = scenario.checks(report)
    chaos["checks"] = [asdict(c) for c in checks]
    report["ok"] = all(c.ok for c in checks)
    chaos["drain"] = _drain_delays(report, config)
    report["config"] = {**report["config"], **_chaos_knobs(config)}
    return report, samples


def _chaos_knobs(config: ChaosConfig) -> dict[str, Any]:
    knobs = asdict(config)
    knobs.pop("timing")
    return {**knobs, "timing": asdict(config.timing)}


def summary_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark table's row for one scenario run."""
    chaos = report["chaos"]
    drain = chaos["drain"]
    worst = max(drain.values(), key=lambda d: d["delay_s"])
    failed = [c["name"] for c in chaos["checks"] if not c["ok"]]
    return {
        "scenario": chaos.get("name", chaos["kind"]),
        "submitted": report["submitted"],
        "delivered": report["delivered"],
        "dead_lettered": report["dead_lettered"],
        "refused_at_intake": report["refused_at_intake"],
        "pending": report["pending"],
        "lost": report["lost"],
        "duplicated": report["duplicates"],
        "downstream_429": sum(d["responses_429"] for d in report["downstreams"].values()),
        "worst_drain_delay_s": worst["delay_s"],
        "elapsed_s": report["elapsed_s"],
        "checks": "all held" if not failed else "FAILED: " + ", ".join(failed),
    }
